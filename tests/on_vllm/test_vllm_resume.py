"""A SIGKILLed GRPO run on the vLLM engine resumes to the uninterrupted run, bit for bit, while
another process loads the cores (vLLM's CPU build, .venv-vllm).

What a vLLM rollout depends on besides the seed and the weights, and how tether pins it down:

- **Batches.** The engine core runs in its own process and batches the requests that have reached
  it when it steps; under load they arrive at other moments, the batches differ, and so do the
  logits' rounding and the sampled tokens. tether queues every request of a call with scheduling
  paused (``VLLMGenerationEngine._generate_together``).
- **Prefix cache.** Keys and values of earlier prompts, computed by earlier weights, would be
  reused after a weight sync; a resumed run starts with an empty cache. tether empties it after
  every sync.
- **Random streams.** Each request has its own seed from the run's seeded stream (saved with the
  checkpoint); the engine's own generator is never used.

Two architectures: the tiny task's Llama (synchronous rollouts), and a Qwen2-shaped model with
tied embeddings (asynchronous rollouts, ``rollout.max_staleness=1``, whose in-flight rollout is
saved with the checkpoint).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

vllm = pytest.importorskip("vllm", reason="runs in .venv-vllm (make test builds it); see README")

from tether.metrics.logger import read_metrics  # noqa: E402

pytestmark = pytest.mark.slow
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def qwen2_tied(tiny_task, tmp_path_factory):
    """The tiny task's tokenizer with a 2-layer Qwen2 (grouped key/value heads, q/k/v biases) whose
    output head is its embedding."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tok = AutoTokenizer.from_pretrained(tiny_task["dir"] / "base_model")
    config = Qwen2Config(vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, use_sliding_window=False, pad_token_id=tok.pad_token_id,
                         eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("qwen2") / "model"
    Qwen2ForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def grpo(task, model, out, *extra):
    return ["grpo", f"model.name_or_path={model}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=tether.tasks.arith.judge:gold_reward", "group.size=2", "rl.iterations=4",
            "rollout.batch_size=8", "rl.minibatch_size=8", "rl.epochs=1", "rollout.max_new_tokens=8",
            "optim.lr=1e-3", "run.save_every=1", "run.progress=false", "run.threads=1", "rollout.engine=vllm",
            f"run.out={out}", *extra]


def tether(args, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**ENV, "TETHER_FAULT": fault} if fault else ENV
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600)


def comparable(out) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "time" and not k.startswith(("timing/", "perf/"))}
            for row in read_metrics(out / "metrics.jsonl")]


def same_weights(a, b) -> bool:
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("model, extra", [("llama", ()), ("qwen2", ("rollout.max_staleness=1",))],
                         ids=["llama-sync", "qwen2-tied-async"])
def test_a_sigkilled_vllm_run_under_load_resumes_bitwise(model, extra, tiny_task, qwen2_tied, tmp_path):
    task = tiny_task["dir"]
    path = task / "base_model" if model == "llama" else qwen2_tied
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    done = tether(grpo(task, path, whole, *extra))
    assert done.returncode == 0, done.stderr[-3000:]
    # Another process keeps a core busy while the run is killed and resumed.
    load = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        killed = tether(grpo(task, path, cut, *extra), fault="iteration:3")  # SIGKILLed before iteration 3
        assert killed.returncode == -9, killed.stderr[-3000:]
        resumed = tether([grpo(task, path, cut)[0], "--resume", str(cut)])
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "resuming from" in resumed.stderr
    finally:
        load.kill()
        load.wait()
    assert comparable(cut) == comparable(whole)
    assert same_weights(cut, whole)
