"""model.attn_implementation through the loaders: the implementation asked for is the one the
model runs, and one that cannot run (a package missing, a device or precision it lacks, a model
class without it) is one paragraph naming the key, before any weight is read."""

from __future__ import annotations

import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

import tether.models.attn_implementation as attention
from tether.common.errors import ConfigError
from tether.models import load_causal_lm, load_scalar_model
from tether.models.attn_implementation import check_attention, load_error, supported

hf_logging.disable_progress_bar()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama")
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def bloom(tmp_path_factory):
    """A model class with eager attention only."""
    path = tmp_path_factory.mktemp("bloom")
    torch.manual_seed(0)
    BloomForCausalLM(BloomConfig(vocab_size=32, hidden_size=16, n_layer=1, n_head=2)).save_pretrained(path)
    return str(path)


def one_paragraph(text: str) -> None:
    assert "\n" not in text.strip() and "Traceback" not in text


@pytest.mark.parametrize("name", ["eager", "sdpa"])
def test_the_causal_lm_runs_the_implementation_asked_for(llama, name):
    assert load_causal_lm(llama, attn_implementation=name).config._attn_implementation == name


@pytest.mark.parametrize("name", ["eager", "sdpa"])
def test_the_scalar_model_runs_the_implementation_asked_for(llama, name):
    model = load_scalar_model(llama, new_head=True, attn_implementation=name)
    assert model.config._attn_implementation == name


def test_the_default_is_sdpa(llama):
    assert load_causal_lm(llama).config._attn_implementation == "sdpa"


def test_flash_attention_without_its_package_is_one_paragraph_naming_the_key(llama, monkeypatch):
    monkeypatch.setattr(attention, "package_installed", lambda package: False)  # not installed, here or anywhere
    with pytest.raises(ConfigError) as info:
        load_causal_lm(llama, attn_implementation="flash_attention_2", key="model.name_or_path")
    text = str(info.value)
    one_paragraph(text)
    assert "'model.attn_implementation' = 'flash_attention_2'" in text and "flash_attn package" in text
    assert "sdpa" in text  # what to choose instead


def test_flash_attention_is_refused_before_any_weight_is_read(llama, monkeypatch):
    """The dry run's meta load stops on it too: the loader checks before from_pretrained."""
    monkeypatch.setattr(attention, "package_installed", lambda package: False)
    import transformers

    def no_load(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_load)
    with pytest.raises(ConfigError, match="flash_attn package"):
        load_causal_lm(llama, attn_implementation="flash_attention_2", meta=True)


def test_flex_attention_without_it_in_torch_is_refused(llama, monkeypatch):
    monkeypatch.setattr(attention, "flex_attention_available", lambda: False)
    with pytest.raises(ConfigError) as info:
        load_scalar_model(llama, new_head=True, attn_implementation="flex_attention")
    one_paragraph(str(info.value))
    assert "'model.attn_implementation' = 'flex_attention'" in str(info.value) and "torch" in str(info.value)


def test_an_implementation_the_model_class_lacks_names_the_key_the_model_and_what_it_supports(bloom):
    with pytest.raises(ConfigError) as info:
        load_causal_lm(bloom, attn_implementation="flex_attention", key="model.name_or_path")
    text = str(info.value)
    one_paragraph(text)
    assert "'model.attn_implementation' = 'flex_attention'" in text
    assert bloom in text and "BloomForCausalLM" in text and "it supports eager" in text


def test_sdpa_on_a_model_class_without_it_runs_eager_and_says_so(bloom, caplog):
    with caplog.at_level("WARNING", logger="tether.models.attn_implementation"):
        model = load_causal_lm(bloom)
    assert model.config._attn_implementation == "eager"
    assert "runs eager attention" in caplog.text


def test_supported_lists_what_a_class_declares():
    assert supported(LlamaForCausalLM) == ["eager", "sdpa", "flash_attention_2", "flex_attention"]
    assert supported(BloomForCausalLM) == ["eager"]


def test_a_load_time_attention_error_is_reworded_naming_the_key():
    err = ValueError("FooForCausalLM does not support Flash Attention 2 yet. Please request to add support ...")
    reworded = load_error(err, "flash_attention_2", "'m' (model.name_or_path)", None)
    assert isinstance(reworded, ConfigError)
    text = str(reworded)
    one_paragraph(text)
    assert "'model.attn_implementation' = 'flash_attention_2'" in text and "FooForCausalLM" in text
    assert load_error(OSError("no file named config.json"), "eager", "'m'", None) is None  # not about attention
    assert load_error(ValueError("bad attention weights"), "sdpa", "'m'", None) is None  # the default never is


@pytest.mark.parametrize("device, dtype, precision, needle", [
    ("cpu", "float32", "bf16", "runs on CUDA GPUs only"),
    ("mps", "bfloat16", "fp32", "runs on CUDA GPUs only"),
    ("cuda", "float32", "fp32", "fp16/bf16 only"),
])
def test_flash_attention_where_it_cannot_run_is_refused(monkeypatch, device, dtype, precision, needle):
    monkeypatch.setattr(attention, "check_installed", lambda name, key=attention.KEY: None)  # as if installed
    with pytest.raises(ConfigError, match=needle) as info:
        check_attention("flash_attention_2", torch.device(device), dtype, precision)
    one_paragraph(str(info.value))
    assert "model.attn_implementation" in str(info.value)


@pytest.mark.parametrize("dtype, precision", [("bfloat16", "fp32"), ("float32", "bf16"), ("float16", "fp16")])
def test_flash_attention_on_cuda_in_half_precision_passes(monkeypatch, dtype, precision):
    monkeypatch.setattr(attention, "check_installed", lambda name, key=attention.KEY: None)
    check_attention("flash_attention_2", torch.device("cuda", 0), dtype, precision)


@pytest.mark.parametrize("name", ["sdpa", "eager"])
def test_the_others_run_on_a_cpu(name):
    check_attention(name, torch.device("cpu"))


def test_flex_attention_for_a_trained_model_on_a_cpu_is_refused_naming_torchs_reason():
    """flex_attention runs forward on a CPU, but this torch has no backward there: a run would fail
    at its first update, so it is refused when the settings are made."""
    if attention.flex_backward_missing("cpu") is None:
        pytest.skip("this torch has a FlexAttention backward on a CPU")
    with pytest.raises(ConfigError) as info:
        check_attention("flex_attention", torch.device("cpu"))
    text = str(info.value)
    one_paragraph(text)
    assert "'model.attn_implementation' = 'flex_attention'" in text and "no FlexAttention backward on a CPU" in text
    assert "does not support backward on CPU" in text  # torch's own words
    assert "sdpa (the default) or eager" in text


def test_flex_attention_is_refused_only_where_torch_lacks_the_backward(monkeypatch):
    """The gap is asked of torch, not written down: a torch with the kernel passes; a frozen model
    (no backward) passes; CUDA is never probed."""
    check_attention("flex_attention", torch.device("cpu"), trained=False)
    assert attention.flex_backward_missing.__wrapped__("cuda") is None
    monkeypatch.setattr(attention, "flex_backward_missing", lambda device_type: None)  # a torch with the kernel
    check_attention("flex_attention", torch.device("cpu"))


def test_flex_attentions_cpu_gap_is_real():
    """The probe agrees with a model: a Llama under flex_attention has no backward on this CPU
    exactly when the probe says so."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    config._attn_implementation = "flex_attention"
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    ids = torch.randint(0, 32, (1, 6))
    with torch.no_grad():
        model(ids)  # the forward runs
    try:
        model(ids).logits.sum().backward()
        has_backward = True
    except NotImplementedError:
        has_backward = False
    assert has_backward == (attention.flex_backward_missing("cpu") is None)


def test_every_device_gap_names_an_implementation_tether_offers():
    assert {name for name, _, _ in attention.DEVICE_GAPS} <= set(attention.CHOICES)
