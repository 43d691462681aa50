"""Shared pieces of the bad-input tests (test_bad_input_*.py): files, CLI argument lists and
the clean-error assertion. Their fixtures (task, no_template_model, two_output_rm) are in
conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

from tether.cli import main
from tether.metrics.logger import read_metrics
from tether.runs import MANIFEST

def write_jsonl(path: Path, rows: list) -> Path:
    """Rows as JSON lines; a str row is written verbatim, a bytes row as raw bytes."""
    data = b""
    for row in rows:
        if isinstance(row, bytes):
            data += row + b"\n"
        elif isinstance(row, str):
            data += row.encode("utf-8") + b"\n"
        else:
            data += json.dumps(row).encode("utf-8") + b"\n"
    path.write_bytes(data)
    return path


def good_sft(n: int = 8) -> list[dict]:
    return [{"prompt": f"what is {i} + 1 ?", "completion": f"the answer is {i + 1} ."} for i in range(n)]


def good_prefs(n: int = 8) -> list[dict]:
    return [{"prompt": f"what is {i} + 1 ?", "chosen": f"the answer is {i + 1} .", "rejected": "i do not know !"}
            for i in range(n)]


def good_prompts(n: int = 4) -> list[dict]:
    return [{"prompt": f"what is {i} + 2 ?"} for i in range(n)]


LONG_PROMPT = "what is " + " + ".join(["1"] * 60) + " ?"  # far over 32 tokens


def cli(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


def _no_holdout(extra) -> list[str]:
    """No rows held out of data.train, unless ``extra`` gives data.eval (then data.eval_size would
    do nothing, which is refused)."""
    return [] if any(e.startswith("data.eval=") for e in extra) else ["data.eval_size=0"]


def sft_args(task: Path, out: Path, train: Path, *extra: str) -> list[str]:
    return ["sft", f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={train}", *_no_holdout(extra),
            "data.max_length=32", "optim.batch_size=4", "max_steps=2", *extra]


def rm_args(task: Path, out: Path, train: Path, *extra: str) -> list[str]:
    return ["rm", f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={train}", *_no_holdout(extra),
            "data.max_length=32", "optim.batch_size=4", "max_steps=2", "normalize=false", *extra]


def kto_args(task: Path, out: Path, train: Path, *extra: str) -> list[str]:
    return ["kto", f"run.out={out}", "run.progress=false", "run.threads=1", "run.log_every=1",
            f"model.name_or_path={task / 'base_model'}", f"data.train={train}", *_no_holdout(extra),
            "data.max_length=32", "optim.batch_size=4", "max_steps=2", *extra]


def ppo_args(task: Path, out: Path, prompts: Path, *extra: str, reward: str | None = None) -> list[str]:
    reward_arg = reward or "reward.callable=tether.tasks.arith.judge:gold_reward"
    return ["ppo", f"run.out={out}", "run.progress=false", "run.threads=1",
            f"model.name_or_path={task / 'base_model'}", f"prompts={prompts}", reward_arg, "critic.init=policy",
            "rl.iterations=1", "rollout.batch_size=2", "rl.minibatch_size=2", "rl.epochs=1",
            "rollout.max_new_tokens=4", "rollout.max_prompt_length=32", *extra]


def assert_clean_error(code: int, err: str, stage: str, *needles: str) -> str:
    """Exit code 2, one paragraph on stderr, no traceback, naming everything in ``needles``."""
    assert code == 2, err
    text = err.strip()
    assert "Traceback" not in text, text
    assert "\n\n" not in text, f"more than one paragraph:\n{text}"
    lines = [line for line in text.splitlines() if line.startswith(f"tether {stage}: error:")]
    assert len(lines) == 1, f"expected one 'tether {stage}: error:' line:\n{text}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def assert_not_complete(out: Path) -> None:
    assert not out.exists() or not (out / MANIFEST).exists(), f"{out} looks like a complete run"
    if out.exists():
        assert not list(out.rglob(MANIFEST)), f"{out} holds a complete checkpoint"


def data_row(out: Path, key: str):
    rows = [r for r in read_metrics(out / "metrics.jsonl") if key in r]
    assert rows, f"no metrics row with {key}"
    return rows[0][key]
