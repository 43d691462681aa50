"""Override lists for the tiny SFT / reward-model runs shared by the integration tests."""

from __future__ import annotations

SFT_STEPS = 15
RM_STEPS = 10


def sft_overrides(task, out, *extra):
    return [
        f"run.out={out}", "run.progress=false", "run.log_every=1",
        f"model.name_or_path={task / 'base_model'}",
        f"data.train={task / 'sft_train.jsonl'}", f"data.eval={task / 'sft_eval.jsonl'}", "data.max_length=64",
        "optim.lr=0.001", "optim.batch_size=16", "optim.warmup_steps=0", f"max_steps={SFT_STEPS}", *extra,
    ]


def rm_overrides(task, sft_dir, out, *extra):
    return [
        f"run.out={out}", "run.progress=false", "run.log_every=1",
        f"model.name_or_path={sft_dir}",
        f"data.train={task / 'prefs_train.jsonl'}", f"data.eval={task / 'prefs_eval.jsonl'}", "data.max_length=64",
        "optim.lr=0.001", "optim.batch_size=16", f"max_steps={RM_STEPS}", *extra,
    ]


def killed_run_resumes_bitwise(stage: str, args, tmp_path) -> None:
    """`tether STAGE ARGS` SIGKILLed at step 5 (``args(out)`` checkpoints every 2 steps), then
    ``--resume``: it resumes from step 4 and ends with the uninterrupted run's metrics and weights."""
    import os
    import subprocess
    import sys

    import torch
    from safetensors.torch import load_file

    from tether.metrics.logger import read_metrics

    def run(*argv, env=None):
        return subprocess.run([sys.executable, "-m", "tether.cli", stage, *argv], capture_output=True, text=True,
                              timeout=300, env={**os.environ, **(env or {})})

    reference, out = tmp_path / "reference", tmp_path / "killed"
    assert run(*args(reference)).returncode == 0
    assert run(*args(out), env={"TETHER_FAULT": "step:5"}).returncode == -9
    resumed = run("--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from step 4" in resumed.stderr

    def comparable(run_dir):
        return [{k: v for k, v in r.items() if k != "time" and not k.startswith(("timing/", "perf/"))}
                for r in read_metrics(run_dir / "metrics.jsonl")]

    assert comparable(out) == comparable(reference)
    a, b = load_file(str(out / "model.safetensors")), load_file(str(reference / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def without_reward(spec, trained, argv: list[str]) -> list[str]:
    """``argv`` as an algorithm without a reward takes it (its entry's ``needs_reward``: distill): no
    reward or kl keys, and a teacher as the reference (the task's base model: the SFT model's tokenizer)."""
    if spec.needs_reward:
        return argv
    kept = [a for a in argv if not a.startswith(("reward.", "kl."))]
    return [*kept, f"reference={trained['task'] / 'base_model'}"]
