"""`--resume DIR` continues the run in DIR, wherever the command starts and wherever DIR was copied
to, bitwise equal to an uninterrupted run (docs/reliability.md, first new-user trial, class 1); a
kill during the final save leaves nothing behind once the run is resumed (class 8).

The runs are started from one working directory with *relative* paths (as a user typing
`tether ppo model.name_or_path=task/base_model ...` does) and resumed from another.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tether.runs.checkpoint import complete_checkpoints
from tether.cli import main
from tether.runs import MANIFEST

ITERATIONS = 4


def ppo_args(out: str) -> list[str]:
    return ["ppo", "model.name_or_path=task/base_model", "prompts=task/ppo_prompts.jsonl",
            "reward.callable=tether.tasks.arith.judge:gold_reward", "critic.init=policy",
            f"rl.iterations={ITERATIONS}", "rollout.batch_size=8", "rl.minibatch_size=4", "rl.epochs=2",
            "rollout.max_new_tokens=8", "run.save_every=1", "run.progress=false", "run.threads=1", f"run.out={out}"]


def sft_args(out: str) -> list[str]:
    return ["sft", "model.name_or_path=task/base_model", "data.train=task/sft_train.jsonl", "data.eval_size=16",
            "data.max_length=48", "optim.batch_size=8", "max_steps=4", "eval_every=2", "run.save_every=1",
            "run.progress=false", "run.threads=1", "run.log_every=1", f"run.out={out}"]


def rm_args(out: str) -> list[str]:
    return ["rm", "model.name_or_path=task/base_model", "data.train=task/prefs_train.jsonl", "data.eval_size=16",
            "data.max_length=48", "optim.batch_size=8", "max_steps=4", "eval_every=2", "run.save_every=1",
            "run.progress=false", "run.threads=1", "run.log_every=1", f"run.out={out}"]


ARGS = {"ppo": ppo_args, "sft": sft_args, "rm": rm_args}


def tether(args: list[str], cwd: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TETHER_FAULT", None)
    if fault:
        env["TETHER_FAULT"] = fault
    return subprocess.run([sys.executable, "-m", "tether.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def comparable(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("timing/", "perf/"))} for r in rows]


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def leftovers(run_dir: Path) -> list[str]:
    """Temporary or staging directories anywhere in a run directory."""
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                  if p.is_dir() and (".tmp-" in p.name or p.name == ".final-staging"))


@pytest.fixture(scope="module")
def launch(tiny_task, tmp_path_factory) -> Path:
    """The directory runs are started from: it holds `task` (the tiny task) under a relative name."""
    root = tmp_path_factory.mktemp("launch")
    shutil.copytree(tiny_task["dir"], root / "task")
    return root


@pytest.fixture(scope="module")
def uninterrupted(launch):
    """Each stage run start to end from the launch directory: the runs to compare against."""
    runs = {}
    for stage, args in ARGS.items():
        done = tether(args(f"runs/{stage}-ref"), launch)
        assert done.returncode == 0, done.stderr
        runs[stage] = launch / "runs" / f"{stage}-ref"
    return runs


@pytest.mark.parametrize("stage", sorted(ARGS))
def test_resume_from_another_directory_and_of_a_copy(stage, launch, uninterrupted, tmp_path):
    """Killed during its third checkpoint, the run is resumed from elsewhere, and a copy of it too."""
    killed = tether(ARGS[stage](f"runs/{stage}-killed"), launch, fault="checkpoint-write:3")
    assert killed.returncode == -9, killed.stderr
    original = launch / "runs" / f"{stage}-killed"
    assert [p.name for p in complete_checkpoints(original)] == ["step-000001", "step-000002"]
    copy = tmp_path / "elsewhere" / "copied-run"
    shutil.copytree(original, copy)
    before = sorted(p.name for p in original.iterdir())
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()

    resumed = tether([stage, "--resume", str(copy)], elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from step 2 of 4" in resumed.stderr
    assert (copy / MANIFEST).is_file() and not (original / MANIFEST).exists()
    assert sorted(p.name for p in original.iterdir()) == before  # the original was not written to
    assert not (elsewhere / "runs").exists() and not list(elsewhere.iterdir())
    assert comparable(copy) == comparable(uninterrupted[stage])
    assert same_weights(copy, uninterrupted[stage])

    resumed = tether([stage, "--resume", str(original)], elsewhere)
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(original) == comparable(uninterrupted[stage])
    assert same_weights(original, uninterrupted[stage])
    assert leftovers(original) == []

    again = tether([stage, "--resume", str(original)], elsewhere)
    assert again.returncode == 0, again.stderr
    assert "already complete" in again.stderr and "resuming" not in again.stderr
    assert comparable(original) == comparable(uninterrupted[stage])


def test_resume_in_process_from_another_directory(launch, uninterrupted, tmp_path, monkeypatch, capsys):
    """The same through the Python entry points: run_rl stopped by an exception, `main` resumes it."""
    from tether.config import RLConfig, load_config
    from tether.loops.rl_run import run_rl

    monkeypatch.chdir(launch)
    cfg = load_config(RLConfig, None, ppo_args("runs/ppo-in-process")[1:])

    def stop_after_third(it, stats, trainer):
        if it == 3:
            raise RuntimeError("stopped")  # after iteration 3, before its checkpoint

    with pytest.raises(RuntimeError, match="stopped"):
        run_rl(cfg, on_iteration=stop_after_third)
    monkeypatch.chdir(tmp_path)
    out = launch / "runs" / "ppo-in-process"
    assert main(["ppo", "--resume", str(out)]) == 0
    assert "resuming from step 2 of 4" in capsys.readouterr().err
    assert comparable(out) == comparable(uninterrupted["ppo"])
    assert same_weights(out, uninterrupted["ppo"])


@pytest.mark.parametrize("fault", ["checkpoint-write:4", "checkpoint-write:5", "final-move:2"])
def test_kill_during_the_final_save_leaves_nothing_once_resumed(fault, launch, uninterrupted):
    """PPO writes 3 checkpoints, then the critic (4th atomic write) and the policy (5th); a kill in
    either, or while the policy's files move into place, is finished by --resume without a trace."""
    name = f"runs/ppo-final-{fault.replace(':', '-')}"
    killed = tether(ppo_args(name), launch, fault=fault)
    assert killed.returncode == -9, killed.stderr
    out = launch / name
    assert not (out / MANIFEST).exists()
    assert leftovers(out)  # the premise: the kill left a staging directory behind
    resumed = tether(["ppo", "--resume", name], launch)
    assert resumed.returncode == 0, resumed.stderr
    assert leftovers(out) == []
    assert comparable(out) == comparable(uninterrupted["ppo"])
    assert same_weights(out, uninterrupted["ppo"])
