"""The optimisation loop SFT and the reward model share: batches, accumulation, evaluation,
checkpoints and exact resume. A stage supplies its training engine, its loss and its evaluation.
Under torchrun every rank walks the same batches and trains on its slice of each (the engine
splits them); rank 0 alone logs and writes.

Data order is a pure function of (seed, epoch), so the data cursor is just the step number
and a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tether.checkpoint import load_trainer_state, save_checkpoint, set_rank_rng_state, truncate_metrics
from tether.engines import TrainingEngine
from tether.loops.common import announce_resume, batch_indices, progress
from tether.metrics import MetricsLogger
from tether.runs import fault_point
from tether.runtime import rank_seed, world_size


def sequence_tokens(item) -> int:
    """Tokens one training item puts through the model, padding not counted: a demonstration's
    sequence, or a pair's prompt + chosen and prompt + rejected (``perf/tokens_per_s``)."""
    if hasattr(item, "input_ids"):
        return len(item.input_ids)
    if hasattr(item, "chosen_ids"):
        return 2 * len(item.prompt_ids) + len(item.chosen_ids) + len(item.rejected_ids)
    return 0


@dataclass
class SupervisedJob:
    """What a stage hands to :func:`train_supervised`.

    ``loss(model, items)`` returns the micro-batch's mean loss (a tensor) and a dict of float
    stats; the engine weights micro-batches by their share of the batch (``weight_of`` each
    item, e.g. its response tokens). ``evaluate()`` returns a dict of eval metrics. ``tokens_of``
    counts an item's tokens for ``perf/tokens_per_s`` (items that are indices: their row's).
    """

    stage: str
    engine: TrainingEngine
    tokenizer: object
    train: list
    loss: Callable
    evaluate: Callable[[], dict] | None
    weight_of: Callable[[object], float] = lambda item: 1.0
    tokens_of: Callable[[object], int] = sequence_tokens  # for perf/tokens_per_s


def train_supervised(job: SupervisedJob, cfg, out: Path, total_steps: int, ckpt: Path | None) -> dict:
    """Run ``total_steps`` optimiser steps of ``job`` with ``cfg.optim``; return the last eval.

    ``ckpt``: the checkpoint to continue from; ``job.engine`` must already hold its weights.
    """
    opt, run, engine = cfg.optim, cfg.run, job.engine
    start, eval_metrics = 0, {}
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        engine.load_state_dict(state["engine"])
        eval_metrics = state.get("eval_metrics", {})
        start = state["step"]
        set_rank_rng_state(state)
        truncate_metrics(out, start, job.stage)
    announce_resume(ckpt, start, total_steps)
    logger = MetricsLogger(out, job.stage)
    micro = opt.batch_size // opt.grad_accum_steps
    bar = progress(total_steps, job.stage, run.progress)
    bar.update(start)
    t0, items_seen, tokens_seen = time.perf_counter(), 0, 0
    for step, idx in enumerate(batch_indices(len(job.train), opt.batch_size, total_steps, run.seed, start), start + 1):
        fault_point("step")
        if world_size() > 1:  # each rank's draws (dropout) from (seed, step, rank)
            torch.manual_seed(rank_seed(run.seed, step))
        items = [job.train[i] for i in idx.tolist()]
        chunks = [items[lo : lo + micro] for lo in range(0, len(items), micro)]
        # Each micro-batch (data parallel: each rank's slice of it) weighs its share of the batch.
        result = engine.train_step(chunks, job.loss, lambda chunk: sum(job.weight_of(x) for x in chunk),
                                   f"{job.stage} loss", step)
        sums = result["stats"]
        norm = result["grad_norm"] if result["grad_norm"] is not None else float("nan")
        items_seen += len(items)
        tokens_seen += sum(job.tokens_of(x) for x in items)
        bar.update(1)
        if "train/loss" in sums:
            bar.set_postfix(loss=f"{sums['train/loss']:.3f}")
        metrics = {}
        if step % run.log_every == 0 or step == total_steps:
            metrics.update(sums)
            metrics.update({"optim/lr": engine.last_lr(), "optim/grad_norm": norm,
                            "optim/skipped_steps": result["skipped_steps"],
                            "perf/examples_per_s": items_seen / (time.perf_counter() - t0),
                            "perf/tokens_per_s": tokens_seen / (time.perf_counter() - t0)})
        if job.evaluate is not None and (step % cfg.eval_every == 0 or step == total_steps):
            eval_metrics = job.evaluate()
            metrics.update(eval_metrics)
        if metrics:
            logger.log(step, metrics)
        if run.save_every and step % run.save_every == 0 and step < total_steps:
            state = {"engine": engine.state_dict(), "eval_metrics": eval_metrics}
            save_checkpoint(out, step, {"model": engine}, job.tokenizer, state, run.keep_checkpoints)
    bar.close()
    logger.close()
    return eval_metrics

