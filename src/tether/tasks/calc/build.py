"""Materialise the calc (tool-use) demo task as ordinary files, like :mod:`tether.tasks.arith.build`.

:func:`build_task` writes into ``out_dir``:

- ``tokenizer/``: the word-level tokenizer (numbers 0..999, the chat and tool-call words);
- ``base_model/``: a random-init tiny Llama (arith's, with 128 positions) and the tokenizer;
- ``sft_tools_train.jsonl``: ``{"messages"}``, each tool demonstration as TWO rows, since SFT trains
  on a row's last assistant message: (question -> call) and (question, call, result -> answer);
- ``sft_notool_train.jsonl``: ``{"messages"}``, (question -> answer), as many rows as the tool file;
- ``sft_tools_eval.jsonl``, ``sft_notool_eval.jsonl``: the same on the held-out facts;
- ``rl_prompts.jsonl``: ``{"prompt", "tools"}``, every training fact once, offering ``calculator``;
- ``eval_prompts.jsonl``: ``{"prompt", "tools"}``, the ``n_eval_prompts`` held-out facts;
- ``task.json``: the manifest (seed, sizes, file names, judge, reward and tool specs, statistics).

The ``n_eval_prompts`` evaluation facts are drawn with the seed and kept out of every other file:
they measure whether a policy computes products it never saw (with the tool or in its head). The
no-tool file has the same number of rows as the tool file, so the two SFT runs take the same steps.
Both demonstrators are right ``DEMO_P_CORRECT`` (0.70) of the time (:mod:`tether.tasks.calc.world`).

Everything is a deterministic function of ``seed`` (and the sizes); files are written to temporary
names and renamed; ``task.json`` is written last, so a directory holding it is complete; a complete
directory of the same seed and sizes is reused.

    python -m tether.tasks.calc.build runs/calc/task
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from tether.tasks.arith.build import MANIFEST, complete_manifest, write_json, write_jsonl, write_models
from tether.tasks.calc import judge, world

TASK_NAME = "calc"
FORMAT_VERSION = 1
JUDGE_SPEC = "tether.tasks.calc.judge:gold_score"
REWARD_SPEC = "tether.tasks.calc.judge:gold_reward"
TOOL_SPEC = "tether.tasks.calc.tools:calculator"

FILES: dict[str, str] = {
    "tokenizer": "tokenizer",
    "base_model": "base_model",
    "sft_tools_train": "sft_tools_train.jsonl",
    "sft_tools_eval": "sft_tools_eval.jsonl",
    "sft_notool_train": "sft_notool_train.jsonl",
    "sft_notool_eval": "sft_notool_eval.jsonl",
    "rl_prompts": "rl_prompts.jsonl",
    "eval_prompts": "eval_prompts.jsonl",
}


def _stream(seed: int, name: str) -> random.Random:
    """An independent, reproducible random stream per artefact."""
    return random.Random(f"tether/{TASK_NAME}/{seed}/{name}")


def split_facts(seed: int, n_eval: int) -> tuple[list[str], list[str]]:
    """(training prompts, held-out evaluation prompts): ``n_eval`` facts drawn with ``seed``, the
    rest in the world's order."""
    if not 1 <= n_eval < len(world.PROMPTS):
        raise ValueError(f"n_eval_prompts must be in 1..{len(world.PROMPTS) - 1}, got {n_eval}")
    held = _stream(seed, "eval_prompts").sample(world.PROMPTS, n_eval)
    kept = set(held)
    return [p for p in world.PROMPTS if p not in kept], held


def tool_rows(rng: random.Random, prompts: list[str], n: int) -> list[dict[str, Any]]:
    """``n`` tool demonstrations as ``2 n`` SFT rows: (question -> call), then (question, call,
    result -> answer)."""
    rows = []
    for _ in range(n):
        messages = world.sample_tool_demonstration(rng, rng.choice(prompts))
        rows += [{"messages": messages[:2]}, {"messages": messages}]
    return rows


def direct_rows(rng: random.Random, prompts: list[str], n: int) -> list[dict[str, Any]]:
    """``n`` SFT rows answering without the tool: (question -> answer)."""
    rows = []
    for _ in range(n):
        prompt = rng.choice(prompts)
        rows.append({"messages": [{"role": "user", "content": prompt},
                                  {"role": "assistant", "content": world.sample_direct_answer(rng, prompt)}]})
    return rows


def prompt_rows(prompts: list[str]) -> list[dict[str, Any]]:
    """Prompt rows offering the tool: ``{"prompt", "tools": [calculator's schema]}``."""
    return [{"prompt": p, "tools": [world.TOOL_SCHEMA]} for p in prompts]


def accuracy(rows: list[dict[str, Any]]) -> float | None:
    """The fraction of rows ending in a final answer whose final answer is right (a call row of the
    tool file is skipped: it answers nothing yet)."""
    answers = [r["messages"] for r in rows if not r["messages"][-1]["content"].startswith(world.CALL_OPEN)]
    if not answers:
        return None
    return sum(judge.is_correct(m[0]["content"], m[-1]["content"]) for m in answers) / len(answers)


def _write_data(out_dir: Path, seed: int, sizes: dict[str, int]) -> tuple[dict[str, int], dict[str, Any]]:
    """Every JSONL file; (row counts, statistics for the manifest)."""
    train, held = split_facts(seed, sizes["n_eval_prompts"])
    n, n_eval = sizes["n_sft"], sizes["n_sft_eval"]
    data = {
        "sft_tools_train": tool_rows(_stream(seed, "sft_tools_train"), train, n),
        "sft_tools_eval": tool_rows(_stream(seed, "sft_tools_eval"), held, n_eval),
        "sft_notool_train": direct_rows(_stream(seed, "sft_notool_train"), train, 2 * n),
        "sft_notool_eval": direct_rows(_stream(seed, "sft_notool_eval"), held, 2 * n_eval),
        "rl_prompts": prompt_rows(train),
        "eval_prompts": prompt_rows(held),
    }
    counts = {name: write_jsonl(out_dir / FILES[name], rows) for name, rows in data.items()}
    stats = {"n_facts": len(world.PROMPTS), "n_train_facts": len(train), "n_eval_facts": len(held),
             "demonstrator_accuracy_tools": accuracy(data["sft_tools_train"]),
             "demonstrator_accuracy_notool": accuracy(data["sft_notool_train"])}
    return counts, stats


def build_task(out_dir: Path, seed: int = 0, n_sft: int = 10000, n_sft_eval: int = 250,
               n_eval_prompts: int = 128) -> dict[str, Any]:
    """Write the calc task's files into ``out_dir`` and return the manifest (also in ``task.json``).

    ``n_sft``: tool demonstrations (``2 n_sft`` rows in each SFT training file); ``n_sft_eval``: the
    same for the evaluation files; ``n_eval_prompts``: held-out facts. Reuses a complete ``out_dir``
    built with the same seed and sizes."""
    out_dir = Path(out_dir)
    sizes = {"n_sft": n_sft, "n_sft_eval": n_sft_eval, "n_eval_prompts": n_eval_prompts}
    params = {"seed": seed, **sizes}
    existing = complete_manifest(out_dir, params, FORMAT_VERSION)
    if existing is not None:
        return existing
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)  # an interrupted rebuild must not look complete
    counts, stats = _write_data(out_dir, seed, sizes)
    vocab_size, n_params = _write_models(out_dir, seed)
    manifest: dict[str, Any] = {
        "task": TASK_NAME, "format_version": FORMAT_VERSION, "seed": seed, "params": params,
        "files": dict(FILES), "judge": JUDGE_SPEC, "reward": REWARD_SPEC, "tool": TOOL_SPEC,
        "tool_schema": world.TOOL_SCHEMA, "best_gold": judge.BEST_SCORE, **stats,
        "vocab_size": vocab_size, "n_params": n_params, "counts": counts,
    }
    write_json(out_dir / MANIFEST, manifest)
    return manifest


def _write_models(out_dir: Path, seed: int) -> tuple[int, int]:
    """Save ``tokenizer/`` and ``base_model/``; return (vocab size, parameter count)."""
    from tether.tasks.arith.model import build_base_model
    from tether.tasks.calc.tokenizer import MODEL_MAX_LENGTH, build_tokenizer

    tokenizer = build_tokenizer()
    model = build_base_model(tokenizer, seed, max_positions=MODEL_MAX_LENGTH)
    return write_models(out_dir, tokenizer, model, FILES)


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.tasks.calc.build OUT [--seed S] [--n-sft N]``: build the task, print its manifest."""
    p = argparse.ArgumentParser(description="Build the calc (tool-use) demo task.")
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n-sft", type=int, default=10000, help="tool demonstrations (two SFT rows each)")
    args = p.parse_args(argv)
    manifest = build_task(args.out, seed=args.seed, n_sft=args.n_sft)
    print({k: manifest[k] for k in ("task", "seed", "n_train_facts", "n_eval_facts", "vocab_size", "n_params")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
