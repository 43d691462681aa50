"""A LoRA run's ``adapter/`` loads with ``PeftModel.from_pretrained`` on the base it records,
from any directory, also when tether added a pad token (a tokenizer without one, GPT-2's) and
so grew the loaded model's vocabulary; and a GPT-2 LoRA run prints no library warnings."""

from __future__ import annotations

import json
import warnings

import torch

from tether.cli import main
from tether.models.lora import ADAPTER_DIR

from bad_input_helpers import good_sft, write_jsonl


def _lora_sft(foreign, tmp_path, name: str = "gpt2", *extra: str):
    train = write_jsonl(tmp_path / "train.jsonl", good_sft(16))
    out = tmp_path / f"lora-{name}"
    code = main(["sft", f"run.out={out}", "run.progress=false", "run.threads=1", f"model.name_or_path={foreign[name]}",
                 f"data.train={train}", "data.eval_size=0", "data.max_length=24", "optim.batch_size=4", "max_steps=2",
                 "lora.r=4", *extra])
    assert code == 0
    return out


def test_adapter_loads_on_its_recorded_base_after_a_pad_token_was_added(foreign, tmp_path, monkeypatch):
    """The merged model has the grown vocabulary (the pad row); the adapter on the published base
    gives the merged model's logits over the base's tokens."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = _lora_sft(foreign, tmp_path)
    base_path = json.loads((out / ADAPTER_DIR / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base_path == str(foreign["gpt2"].resolve())
    monkeypatch.chdir(tmp_path.parent)  # the recorded path is absolute: loads from anywhere
    base = AutoModelForCausalLM.from_pretrained(base_path)
    vocab = base.get_input_embeddings().num_embeddings
    merged = AutoModelForCausalLM.from_pretrained(out)
    assert merged.get_input_embeddings().num_embeddings == vocab + 1  # tether's pad token
    adapted = PeftModel.from_pretrained(base, str(out / ADAPTER_DIR))
    ids = AutoTokenizer.from_pretrained(base_path)("user\nwhat is 2 + 1 ?", return_tensors="pt").input_ids
    with torch.no_grad():
        want = merged(ids).logits[..., :vocab]
        got = adapted(ids).logits
    assert got.shape == want.shape
    assert float((got - want).abs().max()) <= 1e-5


def test_gpt2_lora_run_warns_nothing(foreign, tmp_path, capfd):
    """peft's Conv1D correction and the two libraries' deprecation notices stay out of the run."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _lora_sft(foreign, tmp_path)
    err = capfd.readouterr().err
    assert not [str(w.message) for w in caught if "peft" in w.filename or "transformers" in w.filename]
    assert "Warning" not in err, err


def test_rebuilt_sharded_model_keeps_the_absolute_base(foreign, tmp_path, monkeypatch):
    """The FSDP export rebuilds the peft model from its gathered weights: the adapter it writes
    names the absolute base even when the run was given a relative path."""
    from peft import PeftModel

    from tether.distributed.export import rebuild_plain
    from tether.models import load_causal_lm, load_tokenizer
    from tether.models.lora import save_merged, wrap_lora
    from tether.config import SFTConfig, load_config

    monkeypatch.chdir(foreign["gpt2"].parent)
    relative = foreign["gpt2"].name
    tok = load_tokenizer(relative)
    lora = load_config(SFTConfig, None, [f"model.name_or_path={relative}", "data.train=x.jsonl", "lora.r=4"]).lora
    model = wrap_lora(load_causal_lm(relative, tok), lora, scalar=False)
    plain = rebuild_plain(model, model.state_dict())
    save_merged(plain, tmp_path / "final")
    recorded = json.loads((tmp_path / "final" / ADAPTER_DIR / "adapter_config.json").read_text())
    assert recorded["base_model_name_or_path"] == str(foreign["gpt2"].resolve())
    assert model.peft_config["default"].base_model_name_or_path == str(foreign["gpt2"].resolve())
    monkeypatch.chdir(tmp_path)
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(recorded["base_model_name_or_path"]),
                              str(tmp_path / "final" / ADAPTER_DIR))


def test_a_lora_run_reruns_into_its_own_directory(foreign, tmp_path):
    """The same command again starts afresh in place: the final save replaces the earlier
    adapter/ directory (a rename cannot replace a non-empty directory)."""
    out = _lora_sft(foreign, tmp_path)
    first = (out / ADAPTER_DIR / "adapter_model.safetensors").stat().st_mtime_ns
    assert _lora_sft(foreign, tmp_path) == out
    assert (out / ADAPTER_DIR / "adapter_model.safetensors").stat().st_mtime_ns != first
    assert not list(out.glob(".final-staging*"))
