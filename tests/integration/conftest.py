"""A tiny SFT checkpoint and a reward model trained from it, built once for the integration tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers.utils import logging as hf_logging

hf_logging.disable_progress_bar()

from stage_helpers import rm_overrides, sft_overrides  # noqa: E402


@pytest.fixture(scope="session")
def trained(tiny_task, tmp_path_factory):
    """Run SFT then the reward model once: {'task', 'sft', 'rm' (paths), 'sft_result', 'rm_result'}."""
    from tether.config import RewardModelConfig, SFTConfig, load_config
    from tether.objectives.reward_model import run_reward_model
    from tether.objectives.sft import run_sft

    task = tiny_task["dir"]
    root = tmp_path_factory.mktemp("runs")
    sft_cfg = load_config(SFTConfig, None, sft_overrides(task, root / "sft"))
    sft = run_sft(sft_cfg)
    rm_cfg = load_config(RewardModelConfig, None, rm_overrides(task, root / "sft", root / "rm"))
    rm = run_reward_model(rm_cfg)
    return {"task": task, "root": root, "sft": root / "sft", "rm": root / "rm",
            "sft_cfg": sft_cfg, "rm_cfg": rm_cfg, "sft_result": sft, "rm_result": rm}


# -- fixtures of the bad-input tests (test_bad_input_*.py) -------------------------------


@pytest.fixture(scope="session")
def task(tiny_task) -> Path:
    """The tiny demo task directory (bad-input tests)."""
    return tiny_task["dir"]


@pytest.fixture(scope="session")
def no_template_model(task, tmp_path_factory) -> Path:
    """The base model with its chat template removed."""
    path = tmp_path_factory.mktemp("no-template") / "model"
    shutil.copytree(task / "base_model", path)
    (path / "chat_template.jinja").unlink(missing_ok=True)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.pop("chat_template", None)
    cfg_path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="session")
def two_output_rm(task, tmp_path_factory) -> Path:
    """A sequence-classification checkpoint whose head has two outputs."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = tmp_path_factory.mktemp("rm2") / "rm"
    model = AutoModelForSequenceClassification.from_pretrained(task / "base_model", num_labels=2)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(task / "base_model").save_pretrained(path)
    return path



# -- foreign models (not Llama): GPT-2 and Qwen2 with a byte-level BPE tokenizer -----------------

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="session")
def foreign(task, tmp_path_factory) -> dict:
    """Tiny random GPT-2 (32 positions, learned position table) and Qwen2 (48 positions) with a
    byte-level BPE tokenizer trained on the task's text (chat template, EOS, no pad token), a
    reward-model (scalar-head) checkpoint, and a causal LM whose checkpoint lacks a weight."""
    import torch
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        AutoModelForSequenceClassification,
        GPT2Config,
        GPT2LMHeadModel,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    root = tmp_path_factory.mktemp("foreign")
    rows = [json.loads(line) for line in (task / "sft_train.jsonl").read_text().splitlines()]
    corpus = [f"{m['role']}\n{m['content']}" for row in rows for m in row["messages"]]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")
    tok.chat_template = CHATML
    eos = tok.eos_token_id
    torch.manual_seed(0)
    made = {
        "gpt2": GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                           bos_token_id=eos, eos_token_id=eos)),
        "qwen2": Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                              max_position_embeddings=48, bos_token_id=eos, eos_token_id=eos)),
    }
    paths = {}
    for name, model in made.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths[name] = root / name
    rm = AutoModelForSequenceClassification.from_pretrained(task / "base_model", num_labels=1)
    rm.save_pretrained(root / "rm")
    shutil.copytree(task / "tokenizer", root / "rm", dirs_exist_ok=True)
    paths["rm"] = root / "rm"
    lacking = root / "lacking"
    shutil.copytree(task / "base_model", lacking)
    weights = load_file(str(lacking / "model.safetensors"))
    dropped = sorted(k for k in weights if "layers.1.mlp" in k)
    save_file({k: v for k, v in weights.items() if k not in dropped}, str(lacking / "model.safetensors"),
              metadata={"format": "pt"})
    paths["lacking"] = lacking
    return paths


@pytest.fixture(scope="module")
def one_node():
    """A local Ray cluster of 2 CPUs for one test module's in-process runs (test_ray.py,
    test_supervised_ray.py), shut down after it."""
    ray = pytest.importorskip("ray")  # requirements.lock installs it; a bare `pip install -e .` may not
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()

