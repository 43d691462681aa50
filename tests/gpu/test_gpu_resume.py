"""A checkpoint on the device and a bitwise resume: SFT killed (SIGKILL, ``TETHER_FAULT``) while
writing its third checkpoint and resumed with ``--resume`` ends with the same metrics and
bitwise the same weights as the run that was never stopped (tests/integration/test_resume_anywhere.py
does the same on the CPU).

Bitwise on a GPU needs kernels that give the same bits for the same inputs: the runs go through
the real CLI in a child process that first calls ``torch.use_deterministic_algorithms(True)``
(SDPA's memory-efficient backward and the embedding backward otherwise add with atomics, in any
order), with ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS's deterministic workspace). fp32, no
dropout; SFT draws no random numbers on the device (its data order is drawn on the CPU, whose RNG
state the checkpoint holds), so nothing else differs between the two runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from gpu_helpers import stage_args
from safetensors.torch import load_file

pytestmark = pytest.mark.gpu

SRC = Path(__file__).resolve().parents[2] / "src"
# The CLI, with deterministic kernels (warn_only: an op with no deterministic kernel warns, and
# would then show as a weight difference below rather than a crash).
DETERMINISTIC_CLI = ("import sys, torch; torch.use_deterministic_algorithms(True, warn_only=True); "
                     "from tether.cli import main; sys.exit(main(sys.argv[1:]))")


def tether(args: list[str], fault: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
           "PYTHONPATH": os.pathsep.join([str(SRC), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("TETHER_FAULT", None)
    if fault:
        env["TETHER_FAULT"] = fault
    return subprocess.run([sys.executable, "-c", DETERMINISTIC_CLI, *args], env=env, capture_output=True, text=True,
                          timeout=300)


def sft_args(gpu_task, out) -> list[str]:
    task = gpu_task["task"]
    return ["sft", *stage_args(out), f"model.name_or_path={gpu_task['qwen2']}",
            f"data.train={task / 'sft_train.jsonl'}", "data.eval_size=16", "data.max_length=48", "optim.batch_size=8",
            "max_steps=4", "eval_every=2", "run.save_every=1"]


def comparable(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("timing/", "perf/"))} for r in rows]


def weight_differences(a: Path, b: Path) -> dict[str, float]:
    """The largest |a - b| of each weight that differs (empty: bitwise equal)."""
    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    return {k: float((wa[k].double() - wb[k].double()).abs().max()) for k in wa if not torch.equal(wa[k], wb[k])}


def test_sft_killed_mid_checkpoint_resumes_bitwise(gpu_task, tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    done = tether(sft_args(gpu_task, ref))
    assert done.returncode == 0, done.stderr[-3000:]
    stopped = tether(sft_args(gpu_task, killed), fault="checkpoint-write:3")
    assert stopped.returncode == -9, stopped.stderr[-3000:]
    resumed = tether(["sft", "--resume", str(killed)])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from step 2 of 4" in resumed.stderr
    assert comparable(killed) == comparable(ref)
    assert weight_differences(killed, ref) == {}
