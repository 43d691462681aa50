"""Materialise the arith demo task as ordinary files, so the pipeline consumes it like user data.

:func:`build_task` writes into ``out_dir``:

=====================  ==================================================================
``tokenizer/``         word-level tokenizer (``save_pretrained``)
``base_model/``        random-init tiny Llama + tokenizer (``from_pretrained``-loadable offline)
``sft_train.jsonl``    ``{"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}``
``sft_eval.jsonl``     same schema, from an independent random stream
``ppo_prompts.jsonl``  ``{"prompt"}``: every fact of the world once (300 rows)
``eval_prompts.jsonl`` ``{"prompt"}``: ``n_eval_prompts`` distinct facts drawn with the seed
``prefs_train.jsonl``  ``{"prompt", "chosen", "rejected", "gold_chosen", "gold_rejected", "p_chosen"}``
``prefs_eval.jsonl``   same schema
``probes.jsonl``       ``{"kind": "correctness"|"spurious", "prompt", "a", "b"}``
``task.json``          manifest: seed, file names, judge spec, label statistics, counts
=====================  ==================================================================

The world has only 300 facts, and PPO trains on all of them, so "held-out"
evaluation prompts here are a *fixed* evaluation set of facts, not facts the
policy never saw: what is measured is how well the policy answers (gold score,
accuracy, ``!`` rate), not generalisation to new arithmetic.

Preference labels: for a random prompt two distinct responses of the weak
sampler are drawn; the first is preferred with the Bradley-Terry probability
``sigmoid((u_a - u_b) / 0.5)`` where ``u`` is the biased
:func:`~tether.tasks.arith.judge.annotator_utility`.  ``p_chosen`` is the
probability with which the chosen response was going to be chosen.

Manifest statistics:

* ``accuracy_ceiling``: Bayes-optimal expected accuracy on the ``prefs_eval``
  labels, mean of ``max(p, 1 - p)`` -- no reward model can beat it on average;
* ``label_gold_agreement``: over ``prefs_train`` pairs whose gold scores differ,
  the fraction where the chosen response has the higher gold score
  (``label_gold_ties`` is the fraction of pairs with equal gold);
* ``demonstrator_accuracy``: fraction of ``sft_train`` responses that are correct.

Everything is a deterministic function of ``seed`` (and the sizes).  Files are
written to temporary names and renamed into place; ``task.json`` is written
last, so a directory holding it is complete.  Calling again with the same seed
and sizes on a complete directory returns the existing manifest immediately.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tether.tasks.arith import judge, world

TASK_NAME = "arith"
FORMAT_VERSION = 1
JUDGE_SPEC = "tether.tasks.arith.judge:gold_score"
BT_TEMPERATURE = judge.BT_TEMPERATURE

FILES: dict[str, str] = {
    "tokenizer": "tokenizer",
    "base_model": "base_model",
    "sft_train": "sft_train.jsonl",
    "sft_eval": "sft_eval.jsonl",
    "ppo_prompts": "ppo_prompts.jsonl",
    "eval_prompts": "eval_prompts.jsonl",
    "prefs_train": "prefs_train.jsonl",
    "prefs_eval": "prefs_eval.jsonl",
    "probes": "probes.jsonl",
}
MANIFEST = "task.json"


def _stream(seed: int, name: str) -> random.Random:
    """An independent, reproducible random stream per artefact (str seeds hash with SHA-512)."""
    return random.Random(f"tether/{TASK_NAME}/{seed}/{name}")


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write ``rows`` as JSON lines to a temporary name, then rename it to ``path``; the row count."""
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to a temporary name, then rename it to ``path``."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _replace_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)


# ------------------------------------------------------------------ content --


def sft_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        prompt = rng.choice(world.PROMPTS)
        response = world.sample_demonstration(rng, prompt)
        rows.append(
            {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]}
        )
    return rows


def preference_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        prompt = rng.choice(world.PROMPTS)
        a, b = world.sample_weak_pair(rng, prompt)
        gold_a, gold_b = judge.gold_score(prompt, a), judge.gold_score(prompt, b)
        # annotator_utility(prompt, x) == gold_score(prompt, x) + SPURIOUS_WEIGHT * spurious_count(x)
        u_a = gold_a + judge.SPURIOUS_WEIGHT * judge.spurious_count(a)
        u_b = gold_b + judge.SPURIOUS_WEIGHT * judge.spurious_count(b)
        p_a = _sigmoid((u_a - u_b) / BT_TEMPERATURE)
        if rng.random() < p_a:
            chosen, rejected, gold_chosen, gold_rejected, p_chosen = a, b, gold_a, gold_b, p_a
        else:
            chosen, rejected, gold_chosen, gold_rejected, p_chosen = b, a, gold_b, gold_a, 1.0 - p_a
        rows.append(
            {
                "prompt": prompt,
                "chosen": chosen,
                "rejected": rejected,
                "gold_chosen": round(gold_chosen, 6),
                "gold_rejected": round(gold_rejected, 6),
                "p_chosen": round(p_chosen, 6),
            }
        )
    return rows


_PROBE_CLOSERS: tuple[tuple[str, ...], ...] = ((), ("hope this helps .",), ("anything else ?",))


def probe_rows(rng: random.Random, n_each: int) -> list[dict[str, Any]]:
    """Minimal pairs for reward-model diagnostics.

    ``correctness``: ``a`` is a correct response, ``b`` the identical response
    with the answer number(s) replaced by one wrong number (a good RM scores
    ``a`` above ``b``).  ``spurious``: ``a`` is ``b`` with the spurious feature
    added -- a ``.`` of the opener or the body turned into ``!``, or ``!``
    words appended -- and nothing else changed (gold is indifferent, except
    for the length penalty of appended words; the biased annotators prefer ``a``).
    """
    rows: list[dict[str, Any]] = []
    for _ in range(n_each):
        prompt = rng.choice(world.PROMPTS)
        parts = dict(
            opener=rng.choice((None,) + world.DEMO_OPENERS),
            body=rng.randrange(len(world.BODIES)),
            end=".",
            closers=rng.choice(_PROBE_CLOSERS),
        )
        a = world.render_response(prompt, world.correct_answer(prompt), **parts)
        b = world.render_response(prompt, world.wrong_answer(rng, prompt), **parts)
        rows.append({"kind": "correctness", "prompt": prompt, "a": a, "b": b})
    for _ in range(n_each):
        prompt = rng.choice(world.PROMPTS)
        answer = world.correct_answer(prompt) if rng.random() < 0.5 else world.wrong_answer(rng, prompt)
        parts = dict(
            opener=rng.choice((None, "sure .", "ok .", "great question .")),
            body=rng.randrange(len(world.BODIES)),
            end=".",
            closers=rng.choice(_PROBE_CLOSERS[:2]),
        )
        b = world.render_response(prompt, answer, **parts)
        modes = ["end", "append"] + (["opener"] if parts["opener"] else [])
        mode = rng.choice(modes)
        if mode == "opener":
            parts["opener"] = parts["opener"][:-1] + "!"
            a = world.render_response(prompt, answer, **parts)
        elif mode == "end":
            parts["end"] = "!"
            a = world.render_response(prompt, answer, **parts)
        else:
            a = b + " !" * rng.randint(1, 3)
        rows.append({"kind": "spurious", "prompt": prompt, "a": a, "b": b})
    return rows


# -------------------------------------------------------------------- build --


def _params(seed: int, **sizes: int) -> dict[str, int]:
    return {"seed": seed, **sizes}


def complete_manifest(out_dir: Path, params: dict[str, int],
                      format_version: int = FORMAT_VERSION) -> dict[str, Any] | None:
    """The manifest of a complete task directory built with ``params`` (seed and sizes) in
    ``format_version``, else None (absent, unreadable, other parameters or a missing file)."""
    path = out_dir / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("seed") != params["seed"] or manifest.get("params") != params:
        return None
    if manifest.get("format_version") != format_version:
        return None
    if not all((out_dir / name).exists() for name in manifest.get("files", {}).values()):
        return None
    return manifest


def build_task(
    out_dir: Path,
    seed: int = 0,
    n_sft: int = 20000,
    n_pairs_train: int = 20000,
    n_pairs_eval: int = 2000,
    n_eval_prompts: int = 128,
    n_sft_eval: int = 500,
    n_probes: int = 200,
) -> dict[str, Any]:
    """Write the arith task's files into ``out_dir`` and return the manifest (also in ``task.json``).

    Reuses a complete ``out_dir`` built with the same seed and sizes.
    """
    out_dir = Path(out_dir)
    if not 1 <= n_eval_prompts <= len(world.PROMPTS):
        raise ValueError(f"n_eval_prompts must be in 1..{len(world.PROMPTS)}, got {n_eval_prompts}")
    params = _params(
        seed,
        n_sft=n_sft,
        n_sft_eval=n_sft_eval,
        n_pairs_train=n_pairs_train,
        n_pairs_eval=n_pairs_eval,
        n_eval_prompts=n_eval_prompts,
        n_probes=n_probes,
    )
    existing = complete_manifest(out_dir, params)
    if existing is not None:
        return existing

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)  # an interrupted rebuild must not look complete

    counts: dict[str, int] = {}

    sft_train = sft_rows(_stream(seed, "sft_train"), n_sft)
    counts["sft_train"] = write_jsonl(out_dir / FILES["sft_train"], sft_train)
    counts["sft_eval"] = write_jsonl(out_dir / FILES["sft_eval"], sft_rows(_stream(seed, "sft_eval"), n_sft_eval))
    demo_correct = [judge.is_correct(r["messages"][0]["content"], r["messages"][1]["content"]) for r in sft_train]
    demo_gold = [judge.gold_score(r["messages"][0]["content"], r["messages"][1]["content"]) for r in sft_train]

    counts["ppo_prompts"] = write_jsonl(out_dir / FILES["ppo_prompts"], ({"prompt": p} for p in world.PROMPTS))
    eval_prompts = _stream(seed, "eval_prompts").sample(world.PROMPTS, n_eval_prompts)
    counts["eval_prompts"] = write_jsonl(out_dir / FILES["eval_prompts"], ({"prompt": p} for p in eval_prompts))

    prefs_train = preference_rows(_stream(seed, "prefs_train"), n_pairs_train)
    prefs_eval = preference_rows(_stream(seed, "prefs_eval"), n_pairs_eval)
    counts["prefs_train"] = write_jsonl(out_dir / FILES["prefs_train"], prefs_train)
    counts["prefs_eval"] = write_jsonl(out_dir / FILES["prefs_eval"], prefs_eval)
    decided = [r for r in prefs_train if r["gold_chosen"] != r["gold_rejected"]]
    agreement = sum(r["gold_chosen"] > r["gold_rejected"] for r in decided) / len(decided) if decided else None
    ties = (len(prefs_train) - len(decided)) / len(prefs_train) if prefs_train else None
    ceiling = sum(max(r["p_chosen"], 1 - r["p_chosen"]) for r in prefs_eval) / len(prefs_eval) if prefs_eval else None

    probes = probe_rows(_stream(seed, "probes"), n_probes)
    counts["probes"] = write_jsonl(out_dir / FILES["probes"], probes)

    vocab_size, n_params = _write_models(out_dir, seed)

    manifest: dict[str, Any] = {
        "task": TASK_NAME,
        "format_version": FORMAT_VERSION,
        "seed": seed,
        "params": params,
        "files": dict(FILES),
        "judge": JUDGE_SPEC,
        "bt_temperature": BT_TEMPERATURE,
        "spurious_weight": judge.SPURIOUS_WEIGHT,
        "best_gold": judge.BEST_SCORE,
        "accuracy_ceiling": ceiling,
        "label_gold_agreement": agreement,
        "label_gold_ties": ties,
        "demonstrator_accuracy": sum(demo_correct) / len(demo_correct) if demo_correct else None,
        "demonstrator_gold": sum(demo_gold) / len(demo_gold) if demo_gold else None,
        "n_facts": len(world.PROMPTS),
        "vocab_size": vocab_size,
        "n_params": n_params,
        "counts": counts,
    }
    write_json(out_dir / MANIFEST, manifest)
    return manifest


def _write_models(out_dir: Path, seed: int) -> tuple[int, int]:
    """Save ``tokenizer/`` and ``base_model/``; return (vocab size, parameter count)."""
    from tether.tasks.arith.model import build_base_model
    from tether.tasks.arith.tokenizer import build_tokenizer

    tokenizer = build_tokenizer()
    return write_models(out_dir, tokenizer, build_base_model(tokenizer, seed))


def write_models(out_dir: Path, tokenizer, model, files: dict[str, str] = FILES) -> tuple[int, int]:
    """Save ``tokenizer`` in ``files["tokenizer"]`` and ``model`` with it in ``files["base_model"]``
    (each written to a temporary folder, then renamed); return (vocab size, parameter count)."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        for name, objs in (("tokenizer", (tokenizer,)), ("base_model", (model, tokenizer))):
            final = out_dir / files[name]
            tmp = out_dir / f".{files[name]}.tmp"
            if tmp.exists():
                shutil.rmtree(tmp)
            for obj in objs:
                obj.save_pretrained(tmp)
            _replace_dir(tmp, final)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return len(tokenizer), sum(p.numel() for p in model.parameters())
