"""The optimisation loop the supervised and preference objectives share (:mod:`tether.objectives`:
SFT, the reward model, DPO, SimPO, ORPO, KTO): batches, accumulation, evaluation,
checkpoints and exact resume. The loop holds the trained model's role through a placement
(:class:`tether.roles.supervised.SupervisedModel`, which owns the stage's data, loss and
evaluation) and sends it the row indices of each batch, as the RL loop drives the actor.
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

from tether.runs.checkpoint import load_trainer_state, save_checkpoint, set_rank_rng_state, truncate_metrics
from tether.loops.common import announce_resume, batch_indices, progress
from tether.loops.micro_batches import rows_by_token_budget
from tether.metrics import MetricsLogger
from tether.runs import fault_point
from tether.common.runtime import rank_seed, world_size


def sequence_tokens(item) -> int:
    """Tokens one training item puts through the model, padding not counted: a demonstration's
    sequence, a pair's prompt + chosen and prompt + rejected, or a KTO row's prompt + response (its
    mismatched pair, scored without gradient before the step, not counted) (``perf/tokens_per_s``)."""
    if hasattr(item, "input_ids"):
        return len(item.input_ids)
    if hasattr(item, "chosen_ids"):
        return 2 * len(item.prompt_ids) + len(item.chosen_ids) + len(item.rejected_ids)
    if hasattr(item, "completion_ids"):
        return len(item.prompt_ids) + len(item.completion_ids)
    return 0


def padded_tokens(item) -> int:
    """A training item's length in a padded batch (``optim.micro_batch_tokens`` with
    ``model.padding_free=false``, where a micro-batch costs its rows x its longest row): a
    demonstration's sequence, or a pair's two sequences each as long as the longer response."""
    if hasattr(item, "chosen_ids"):
        return 2 * (len(item.prompt_ids) + max(len(item.chosen_ids), len(item.rejected_ids)))
    return sequence_tokens(item)


@dataclass
class SupervisedJob:
    """What a stage hands to :func:`train_supervised`.

    ``trained``: the trained model's role proxy (``update(rows, micro, step)``,
    ``evaluate()``, ``last_lr()``, ``state_dict()``, ``save_pretrained()``); ``rows``: how many
    training rows there are; ``tokens_of(row)``: a row's tokens for ``perf/tokens_per_s`` and
    padding-free ``optim.micro_batch_tokens`` bins; ``padded_tokens_of(row)``: its length in a
    padded batch, for padded bins (None: ``tokens_of``);
    ``evaluate``: whether there is held-out data to evaluate on.
    """

    stage: str
    trained: object
    tokenizer: object
    rows: int
    tokens_of: Callable[[int], int]
    evaluate: bool = True
    padded_tokens_of: Callable[[int], int] | None = None


def train_supervised(job: SupervisedJob, cfg, out: Path, total_steps: int, ckpt: Path | None) -> dict:
    """Run ``total_steps`` optimiser steps of ``job`` with ``cfg.optim``; return the last eval.

    ``ckpt``: the checkpoint to continue from; ``job.trained`` must already hold its weights.
    """
    opt, run, trained = cfg.optim, cfg.run, job.trained
    start, eval_metrics = 0, {}
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        trained.load_state_dict(state["engine"])
        eval_metrics = state.get("eval_metrics", {})
        start = state["step"]
        set_rank_rng_state(state)
        truncate_metrics(out, start, job.stage)
    announce_resume(ckpt, start, total_steps)
    logger = MetricsLogger(out, job.stage)
    micro = opt.batch_size // opt.grad_accum_steps
    padded = not cfg.model.padding_free  # token-budget bins: rows x longest row, or summed rows
    length_of = (job.padded_tokens_of or job.tokens_of) if padded else job.tokens_of
    bar = progress(total_steps, job.stage, run.progress)
    bar.update(start)
    t0, items_seen, tokens_seen = time.perf_counter(), 0, 0
    for step, idx in enumerate(batch_indices(job.rows, opt.batch_size, total_steps, run.seed, start), start + 1):
        fault_point("step")
        if world_size() > 1:  # each rank's draws (dropout) from (seed, step, rank)
            torch.manual_seed(rank_seed(run.seed, step))
        rows = idx.tolist()
        # Micro-batches of `micro` rows, or binned by their tokens within optim.micro_batch_tokens;
        # each (data parallel: each rank's slice of it) weighs its share of the batch.
        if opt.micro_batch_tokens is not None:
            micro = rows_by_token_budget(rows, length_of, opt.micro_batch_tokens, padded)
        result = trained.update(rows, micro, step)
        sums = result["stats"]
        norm = result["grad_norm"] if result["grad_norm"] is not None else float("nan")
        items_seen += len(rows)
        tokens_seen += sum(job.tokens_of(i) for i in rows)
        bar.update(1)
        if "train/loss" in sums:
            bar.set_postfix(loss=f"{sums['train/loss']:.3f}")
        metrics = {}
        if step % run.log_every == 0 or step == total_steps:
            metrics.update(sums)
            metrics.update({"optim/lr": trained.last_lr(), "optim/grad_norm": norm,
                            "optim/skipped_steps": result["skipped_steps"],
                            "perf/examples_per_s": items_seen / (time.perf_counter() - t0),
                            "perf/tokens_per_s": tokens_seen / (time.perf_counter() - t0)})
        if job.evaluate and (step % cfg.eval_every == 0 or step == total_steps):
            eval_metrics = trained.evaluate()
            metrics.update(eval_metrics)
        if metrics:
            logger.log(step, metrics)
        if run.save_every and step % run.save_every == 0 and step < total_steps:
            state = {"engine": trained.state_dict(), "eval_metrics": eval_metrics}
            save_checkpoint(out, step, {"model": trained}, job.tokenizer, state, run.keep_checkpoints)
    bar.close()
    logger.close()
    return eval_metrics

