"""Shared fixtures. Tests use one torch thread: two threads beside another busy process run
20-50x slower on these machines (DEMO_TASK_NOTES.md), and one thread is immune."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory):
    """The arithmetic task at test size, built once per session: a dict with its directory."""
    from tether.tasks.arith import build_task

    out = tmp_path_factory.mktemp("task")
    meta = build_task(out, seed=0, n_sft=400, n_pairs_train=300, n_pairs_eval=100, n_eval_prompts=16,
                      n_sft_eval=50, n_probes=20)
    return {"dir": out, **meta}


@pytest.fixture(scope="module")
def policy_and_fresh_rm(tiny_task, tmp_path_factory):
    """The tiny task's base model as a policy, and the same trunk with a fresh scalar head saved as
    a reward model (the serving tests'): {"policy", "rm", "task"} paths."""
    from tether.models import load_scalar_model, load_tokenizer

    base = tiny_task["dir"] / "base_model"
    rm_dir = tmp_path_factory.mktemp("serve") / "rm"
    tok = load_tokenizer(str(base))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rm = load_scalar_model(str(base), tok, head_init_std=0.02, new_head=True)
    rm.save_pretrained(rm_dir)
    tok.save_pretrained(rm_dir)
    return {"policy": base, "rm": rm_dir, "task": tiny_task["dir"]}


@pytest.fixture
def no_weights_read(monkeypatch):
    """A test that must finish before any weight is read: transformers' from_pretrained of a causal
    LM or a scalar-head model fails it."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("from_pretrained was called")

    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForSequenceClassification):
        monkeypatch.setattr(auto, "from_pretrained", refuse)
