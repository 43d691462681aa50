"""One iteration of PPO, GRPO and DPO (and SFT with LoRA) through the CLI (``tether.cli.main``)
with ``run.device`` set to the device: each exits 0, writes finite metrics and its model, and
(on CUDA) the device's allocator saw the models."""

from __future__ import annotations

import json
import math

import pytest
import torch
from gpu_helpers import ON_CUDA, stage_args

from tether.cli import main

pytestmark = pytest.mark.gpu


def rows(out) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def check_run(out, key: str) -> None:
    """The run wrote finite ``key`` values and its model; the device held it (CUDA)."""
    values = [r[key] for r in rows(out) if key in r]
    assert values and all(math.isfinite(v) for v in values), (key, values)
    assert (out / "model.safetensors").is_file() or (out / "adapter").is_dir()
    if ON_CUDA:
        assert torch.cuda.max_memory_allocated() > 0


def rl_args(gpu_task, out, *extra) -> list[str]:
    task = gpu_task["task"]
    return [*stage_args(out), f"model.name_or_path={gpu_task['qwen2']}", f"prompts={task / 'ppo_prompts.jsonl'}",
            "reward.callable=tether.tasks.arith.judge:gold_reward", "rl.iterations=1", "rl.epochs=1",
            "rollout.max_new_tokens=8", *extra]


@pytest.mark.parametrize("engine,precision", [("lean", "fp32"), ("lean", "bf16"), ("hf", "fp32")])
def test_ppo_one_iteration(engine, precision, gpu_task, tmp_path):
    out = tmp_path / "ppo"
    assert main(["ppo", *rl_args(gpu_task, out, "critic.init=policy", "rollout.batch_size=8", "rl.minibatch_size=4",
                                 f"rollout.engine={engine}", f"run.precision={precision}")]) == 0
    check_run(out, "objective/score")


def test_grpo_one_iteration_lora_checkpointing_bf16(gpu_task, tmp_path):
    """GRPO as the README's recipe runs it: LoRA adapters, gradient checkpointing, bf16."""
    out = tmp_path / "grpo"
    assert main(["grpo", *rl_args(gpu_task, out, "rollout.batch_size=4", "group.size=4", "rl.minibatch_size=8",
                                  "lora.r=8", "lora.alpha=16", "gradient_checkpointing=true",
                                  "run.precision=bf16")]) == 0
    check_run(out, "objective/score")


def test_asynchronous_ppo_samples_on_the_device_in_a_worker(gpu_task, tmp_path):
    """rollout.max_staleness=1: the worker process keeps its copy on the actor's device; at
    staleness 0 its log-probs are the actor's (TIS weights of 1 up to the device's rounding)."""
    out = tmp_path / "ppo-async"
    assert main(["ppo", *rl_args(gpu_task, out, "critic.init=policy", "rollout.batch_size=8", "rl.minibatch_size=4",
                                 "rl.iterations=2", "rollout.max_staleness=1", "rollout.is_correction=tis")]) == 0
    check_run(out, "objective/score")
    logged = [r for r in rows(out) if "rollout/staleness_max" in r]
    assert [r["rollout/staleness_max"] for r in logged] == [0.0, 1.0]
    assert abs(logged[0]["rollout/is_weight_mean"] - 1) < 1e-3


def test_dpo_steps(gpu_task, tmp_path):
    task, out = gpu_task["task"], tmp_path / "dpo"
    assert main(["dpo", *stage_args(out), f"model.name_or_path={gpu_task['qwen2']}",
                 f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}",
                 "data.max_length=64", "optim.batch_size=8", "max_steps=2", "eval_every=2"]) == 0
    check_run(out, "eval/accuracy")


def test_sft_lora_steps(gpu_task, tmp_path):
    task, out = gpu_task["task"], tmp_path / "sft"
    assert main(["sft", *stage_args(out), f"model.name_or_path={gpu_task['llama']}",
                 f"data.train={task / 'sft_train.jsonl'}", "data.eval_size=16", "data.max_length=64",
                 "optim.batch_size=8", "max_steps=2", "eval_every=2", "lora.r=8", "lora.alpha=16"]) == 0
    check_run(out, "eval/loss")
