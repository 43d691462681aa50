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
