"""Materialise the multi-step demo task as ordinary files, like :mod:`tether.tasks.arith.build`.

:func:`build_task` writes into ``out_dir``:

- ``tokenizer/``, ``base_model/``: the world's word-level tokenizer and arith's tiny random-init Llama;
- ``sft_train.jsonl``, ``sft_eval.jsonl``: ``{"messages"}``, a question and a two-step solution by the
  demonstrator (right per step with ``world.DEMO_P_STEP``);
- ``prm_train.jsonl``, ``prm_eval.jsonl``: ``{"prompt", "completions", "labels"}``, two-step
  solutions by the noisy solver (``world.NOISY_P_STEP``) with each step's gold label: what
  ``tether prm step_separator=';'`` trains on;
- ``prefs_train.jsonl``, ``prefs_eval.jsonl``: ``{"prompt", "chosen", "rejected", "gold_chosen",
  "gold_rejected"}``, two noisy solutions of which exactly one has the right final answer, that one
  chosen: what an outcome reward model (``tether rm``) trains on; gold is the process gold;
- ``rl_prompts.jsonl``: ``{"prompt"}``, every training problem once;
- ``eval_prompts.jsonl``: ``{"prompt"}``, the ``n_eval_prompts`` held-out problems;
- ``task.json``: the manifest (seed, sizes, file names, judges, statistics).

The held-out problems are drawn with the seed and kept out of every other file. Everything is a
deterministic function of ``seed`` and the sizes; files are written to temporary names and renamed;
``task.json`` is written last, so a directory holding it is complete; a complete directory of the
same seed and sizes is reused.

    python -m tether.tasks.steps.build runs/steps/task
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from tether.tasks.arith.build import MANIFEST, complete_manifest, write_json, write_jsonl, write_models
from tether.tasks.steps import judge, world

TASK_NAME = "steps"
FORMAT_VERSION = 1
JUDGE_SPEC = "tether.tasks.steps.judge:gold_score"
REWARD_SPEC = "tether.tasks.steps.judge:gold_reward"

FILES: dict[str, str] = {
    "tokenizer": "tokenizer",
    "base_model": "base_model",
    **{name: f"{name}.jsonl" for name in ("sft_train", "sft_eval", "prm_train", "prm_eval", "prefs_train",
                                          "prefs_eval", "rl_prompts", "eval_prompts")},
}


def _stream(seed: int, name: str) -> random.Random:
    """An independent, reproducible random stream per artefact."""
    return random.Random(f"tether/{TASK_NAME}/{seed}/{name}")


def split_problems(seed: int, n_eval: int) -> tuple[list[str], list[str]]:
    """(training prompts, held-out prompts): ``n_eval`` problems drawn with ``seed``, the rest in order."""
    if not 1 <= n_eval < len(world.PROMPTS):
        raise ValueError(f"n_eval_prompts must be in 1..{len(world.PROMPTS) - 1}, got {n_eval}")
    held = _stream(seed, "eval_prompts").sample(world.PROMPTS, n_eval)
    kept = set(held)
    return [p for p in world.PROMPTS if p not in kept], held


def sft_rows(rng: random.Random, prompts: list[str], n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        prompt = rng.choice(prompts)
        answer = world.join_steps(world.sample_steps(rng, prompt, world.DEMO_P_STEP))
        rows.append({"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]})
    return rows


def prm_rows(rng: random.Random, prompts: list[str], n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        prompt = rng.choice(prompts)
        steps = world.sample_steps(rng, prompt, world.NOISY_P_STEP)
        rows.append({"prompt": prompt, "completions": steps,
                     "labels": world.step_labels(prompt, world.join_steps(steps))})
    return rows


def preference_rows(rng: random.Random, prompts: list[str], n: int) -> list[dict[str, Any]]:
    """``n`` outcome pairs: two noisy solutions, exactly one with the right final answer (redrawn until so)."""
    rows = []
    while len(rows) < n:
        prompt = rng.choice(prompts)
        a, b = (world.join_steps(world.sample_steps(rng, prompt, world.NOISY_P_STEP)) for _ in range(2))
        right_a, right_b = judge.is_correct(prompt, a), judge.is_correct(prompt, b)
        if right_a == right_b:
            continue
        chosen, rejected = (a, b) if right_a else (b, a)
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected,
                     "gold_chosen": judge.gold_score(prompt, chosen), "gold_rejected": judge.gold_score(prompt, rejected)})
    return rows


def _write_data(out_dir: Path, seed: int, sizes: dict[str, int]) -> tuple[dict[str, int], dict[str, Any]]:
    """Every JSONL file; (row counts, statistics for the manifest)."""
    train, held = split_problems(seed, sizes["n_eval_prompts"])
    data = {
        "sft_train": sft_rows(_stream(seed, "sft_train"), train, sizes["n_sft"]),
        "sft_eval": sft_rows(_stream(seed, "sft_eval"), held, sizes["n_sft_eval"]),
        "prm_train": prm_rows(_stream(seed, "prm_train"), train, sizes["n_prm"]),
        "prm_eval": prm_rows(_stream(seed, "prm_eval"), held, sizes["n_prm_eval"]),
        "prefs_train": preference_rows(_stream(seed, "prefs_train"), train, sizes["n_pairs"]),
        "prefs_eval": preference_rows(_stream(seed, "prefs_eval"), held, sizes["n_pairs_eval"]),
        "rl_prompts": [{"prompt": p} for p in train],
        "eval_prompts": [{"prompt": p} for p in held],
    }
    counts = {name: write_jsonl(out_dir / FILES[name], rows) for name, rows in data.items()}
    sft = data["sft_train"]
    labels = [label for row in data["prm_train"] for label in row["labels"]]
    stats = {"n_problems": len(world.PROMPTS), "n_train_problems": len(train), "n_eval_problems": len(held),
             "demonstrator_accuracy": sum(judge.is_correct(r["messages"][0]["content"], r["messages"][1]["content"])
                                          for r in sft) / max(len(sft), 1),
             "prm_correct_step_share": sum(labels) / max(len(labels), 1)}
    return counts, stats


def build_task(out_dir: Path, seed: int = 0, n_sft: int = 20000, n_sft_eval: int = 500, n_prm: int = 10000,
               n_prm_eval: int = 1000, n_pairs: int = 10000, n_pairs_eval: int = 1000,
               n_eval_prompts: int = 256) -> dict[str, Any]:
    """Write the task's files into ``out_dir`` and return the manifest (also in ``task.json``);
    reuses a complete ``out_dir`` built with the same seed and sizes."""
    out_dir = Path(out_dir)
    sizes = {"n_sft": n_sft, "n_sft_eval": n_sft_eval, "n_prm": n_prm, "n_prm_eval": n_prm_eval, "n_pairs": n_pairs,
             "n_pairs_eval": n_pairs_eval, "n_eval_prompts": n_eval_prompts}
    params = {"seed": seed, **sizes}
    existing = complete_manifest(out_dir, params, FORMAT_VERSION)
    if existing is not None:
        return existing
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)  # an interrupted rebuild must not look complete
    counts, stats = _write_data(out_dir, seed, sizes)
    vocab_size, n_params = _write_models(out_dir, seed)
    manifest: dict[str, Any] = {
        "task": TASK_NAME, "format_version": FORMAT_VERSION, "seed": seed, "params": params, "files": dict(FILES),
        "judge": JUDGE_SPEC, "reward": REWARD_SPEC, "step_separator": world.SEPARATOR, **stats,
        "vocab_size": vocab_size, "n_params": n_params, "counts": counts,
    }
    write_json(out_dir / MANIFEST, manifest)
    return manifest


def _write_models(out_dir: Path, seed: int) -> tuple[int, int]:
    """Save ``tokenizer/`` and ``base_model/``; return (vocab size, parameter count)."""
    from tether.tasks.arith.model import build_base_model
    from tether.tasks.steps.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    return write_models(out_dir, tokenizer, build_base_model(tokenizer, seed), FILES)


def main(argv: list[str] | None = None) -> int:
    """``python -m tether.tasks.steps.build OUT [--seed S]``: build the task, print its manifest."""
    p = argparse.ArgumentParser(description="Build the multi-step demo task.")
    p.add_argument("out", type=Path)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    manifest = build_task(args.out, seed=args.seed)
    print({k: manifest[k] for k in ("task", "seed", "n_train_problems", "n_eval_problems", "demonstrator_accuracy",
                                    "prm_correct_step_share", "vocab_size", "n_params")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
