"""SFT, the reward model and DPO under ``placement.backend=ray``: the trained model's role runs
in a Ray worker, the stage's loop in this process, and a fixed-seed run equals its local run.

The worker rebuilds the stage's inputs and model from the config with the same seed, and both
runs use one torch thread (``run.threads=1``; a worker's threads follow its CPUs, 1 here), so
the same ops run in the same order on the same machine: the metrics and the final weights are
compared bitwise (``run_compare``'s tolerances are the ceiling; the assertions ask for 0).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from run_compare import largest_metric_diff, largest_weight_diff, layout
from stage_helpers import rm_overrides, sft_overrides

pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")  # requirements.lock installs it; a bare `pip install -e .` may not

COMMON = ["run.threads=1", "run.save_every=4"]
RAY = ["placement.backend=ray"]


def sft(trained, out: Path, *extra: str) -> dict:
    from tether.config import SFTConfig, load_config
    from tether.objectives.sft import run_sft

    return run_sft(load_config(SFTConfig, None, sft_overrides(trained["task"], out, *COMMON, "max_steps=8", *extra)))


def rm(trained, out: Path, *extra: str) -> dict:
    from tether.config import RewardModelConfig, load_config
    from tether.objectives.reward_model import run_reward_model

    overrides = rm_overrides(trained["task"], trained["sft"], out, *COMMON, "max_steps=6", *extra)
    return run_reward_model(load_config(RewardModelConfig, None, overrides))


def dpo_args(trained, out: Path, *extra: str) -> list[str]:
    task = trained["task"]
    return [f"run.out={out}", "run.progress=false", "run.log_every=1", *COMMON,
            f"model.name_or_path={trained['sft']}", f"data.train={task / 'prefs_train.jsonl'}",
            f"data.eval={task / 'prefs_eval.jsonl'}", "data.max_length=64", "optim.lr=1e-3", "optim.batch_size=8",
            "max_steps=6", "eval_every=3", *extra]


def assert_same_run(local: Path, remote: Path) -> None:
    assert layout(remote) == layout(local)
    assert largest_metric_diff(local, remote)[0] == 0.0
    assert largest_weight_diff(local, remote) == 0.0


def test_sft_under_ray_equals_the_local_run(trained, one_node, tmp_path):
    local = sft(trained, tmp_path / "local")
    remote = sft(trained, tmp_path / "ray", *RAY)
    assert local["engine"] is not None and remote["engine"] is None  # trained in the worker, not here
    assert remote["eval/loss"] == local["eval/loss"]
    assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_reward_model_under_ray_equals_the_local_run(trained, one_node, tmp_path):
    local = rm(trained, tmp_path / "local")
    remote = rm(trained, tmp_path / "ray", *RAY, "placement.ray.roles={reward: {num_cpus: 1}}")
    assert remote["score_offset"] == local["score_offset"] != 0.0  # the offset reached the worker's model
    assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_dpo_under_ray_from_the_cli_equals_the_local_run(trained, one_node, tmp_path):
    from tether.cli import main

    assert main(["dpo", *dpo_args(trained, tmp_path / "local")]) == 0
    assert main(["dpo", *dpo_args(trained, tmp_path / "ray", *RAY)]) == 0
    assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_a_killed_lora_dpo_worker_is_named_and_the_run_resumes_to_the_local_run(trained, tmp_path):
    """Subprocesses (each starts its own local cluster). LoRA: the reference is the worker's own
    base with its adapters off. The policy's worker SIGKILLs itself at its 5th update (checkpoints
    every 2 steps); the driver names the role, and --resume starts a fresh worker from step 4's
    adapters and optimiser state and ends where the uninterrupted local run ends."""
    import subprocess
    import sys

    from tether.cli import main

    lora = ["lora.r=4", "run.save_every=2"]
    assert main(["dpo", *dpo_args(trained, tmp_path / "local", *lora)]) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    killed = tmp_path / "killed"
    stopped = subprocess.run([sys.executable, "-m", "tether.cli", "dpo", *dpo_args(trained, killed, *RAY, *lora)],
                             capture_output=True, text=True, timeout=600,
                             env={**env, "TETHER_FAULT": "ray-policy-update:5"})
    assert stopped.returncode != 0
    assert "The policy role group's Ray worker died during policy.update (worker 0 on" in stopped.stderr
    assert sorted(p.name for p in (killed / "checkpoints").iterdir()) == ["step-000002", "step-000004"]
    resumed = subprocess.run([sys.executable, "-m", "tether.cli", "dpo", "--resume", str(killed)],
                             capture_output=True, text=True, timeout=600, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 4 of 6" in resumed.stderr
    assert largest_metric_diff(tmp_path / "local", killed)[0] == 0.0
    assert largest_weight_diff(tmp_path / "local", killed) == 0.0
