"""Never lose a run: exact resume after an interruption, and SIGKILL at the worst moments.

PPO runs on the tiny task with the base model as policy, the gold judge as a callable reward
and a critic with a fresh head, so no SFT/RM training is needed here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tether.runs.checkpoint import complete_checkpoints
from tether.config import RLConfig, load_config
from tether.loops.rl_run import run_rl
from tether.runs import MANIFEST

ITERATIONS = 4


def ppo_overrides(task_dir: Path, out: Path) -> list[str]:
    return [
        f"model.name_or_path={task_dir / 'base_model'}",
        f"prompts={task_dir / 'ppo_prompts.jsonl'}",
        "reward.callable=tether.tasks.arith.judge:gold_reward",
        "critic.init=policy",
        f"rl.iterations={ITERATIONS}",
        "rollout.batch_size=8",
        "rl.minibatch_size=4",
        "rl.epochs=2",
        "rollout.max_new_tokens=8",
        "run.save_every=1",
        "run.keep_checkpoints=2",
        "run.progress=false",
        "run.threads=1",
        f"run.out={out}",
    ]


def comparable(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("timing/", "perf/"))} for r in rows]


def weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.fixture(scope="module")
def reference_run(tiny_task, tmp_path_factory):
    out = tmp_path_factory.mktemp("ppo-ref") / "run"
    run_rl(load_config(RLConfig, None, ppo_overrides(tiny_task["dir"], out)))
    return out


class Interrupt(Exception):
    pass


def test_interrupted_ppo_resumes_bitwise(tiny_task, reference_run, tmp_path):
    out = tmp_path / "run"
    cfg = load_config(RLConfig, None, ppo_overrides(tiny_task["dir"], out))

    def crash_after_third(it, stats, trainer):
        if it == 3:
            raise Interrupt  # after iteration 3 ran and before its checkpoint: work is lost

    with pytest.raises(Interrupt):
        run_rl(cfg, on_iteration=crash_after_third)
    assert [p.name for p in complete_checkpoints(out)] == ["step-000001", "step-000002"]
    assert not (out / MANIFEST).exists()  # no final model: the run does not look complete
    run_rl(cfg, resume=True)
    assert comparable(out) == comparable(reference_run)
    assert same_weights(out, reference_run)


def _cli(args: list[str], env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("fault", ["checkpoint-write:1", "checkpoint-write:3"])
def test_sigkill_during_checkpoint_write_then_resume(tiny_task, reference_run, tmp_path, fault):
    """SIGKILL inside a checkpoint write (files written, manifest not yet): resume still works."""
    out = tmp_path / "run"
    args = ["ppo", *ppo_overrides(tiny_task["dir"], out)]
    killed = _cli(args, {"TETHER_FAULT": fault})
    assert killed.returncode == -9, killed.stderr
    complete = complete_checkpoints(out)
    k = int(fault.split(":")[1])
    # The checkpoint being written when killed is not complete; every earlier one is.
    assert [p.name for p in complete] == [f"step-{i:06d}" for i in range(max(1, k - 2), k)]
    for ckpt in complete:
        assert (ckpt / "actor" / "config.json").exists() and (ckpt / "trainer_state.pt").exists()
    resumed = _cli(["ppo", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert (out / MANIFEST).exists()
    assert not list((out / "checkpoints").glob(".step-*"))  # the killed write was cleaned up
    assert comparable(out) == comparable(reference_run)
    assert same_weights(out, reference_run)


def kill_at_first_checkpoint(overrides: list[str], out: Path) -> None:
    """Start `tether ppo OVERRIDES` and SIGKILL it as soon as its first checkpoint in ``out`` is complete."""
    import time

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tether.cli", "ppo", *overrides],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not complete_checkpoints(out) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()


def test_sigkill_at_random_times_then_resume(tiny_task, reference_run, tmp_path):
    """Kill the process as soon as its first checkpoint is complete, then resume to the end."""
    out = tmp_path / "run"
    kill_at_first_checkpoint(ppo_overrides(tiny_task["dir"], out), out)
    resumed = _cli(["ppo", "--resume", str(out)])
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(out) == comparable(reference_run)
    assert same_weights(out, reference_run)
