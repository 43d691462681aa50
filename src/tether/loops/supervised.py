"""The optimisation loop SFT and the reward model share: batches, accumulation, evaluation,
checkpoints and exact resume. A stage supplies only its loss and its evaluation.

Data order is a pure function of (seed, epoch), so the data cursor is just the step number
and a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tether.checkpoint import load_trainer_state, save_checkpoint, set_rng_state, truncate_metrics
from tether.loops.common import (
    NonFiniteGuard,
    announce_resume,
    batch_indices,
    grad_norm,
    make_optimizer,
    make_scheduler,
    progress,
    save_final,
)
from tether.metrics import MetricsLogger


@dataclass
class SupervisedJob:
    """What a stage hands to :func:`train_supervised`.

    ``loss(items, weight)`` returns (loss tensor to backpropagate — already multiplied by
    ``weight``, the micro-batch's share of the batch — and a dict of float stats to sum).
    ``evaluate()`` returns a dict of eval metrics.
    """

    stage: str
    model: torch.nn.Module
    tokenizer: object
    train: list
    loss: Callable[[list, float], tuple[torch.Tensor, dict]]
    evaluate: Callable[[], dict] | None
    weight_of: Callable[[object], float] = lambda item: 1.0


def train_supervised(job: SupervisedJob, cfg, out: Path, total_steps: int, ckpt: Path | None) -> dict:
    """Run ``total_steps`` optimiser steps of ``job`` with ``cfg.optim``; return the last eval.

    ``ckpt``: the checkpoint to continue from; ``job.model`` must already hold its weights.
    """
    opt, run = cfg.optim, cfg.run
    optimizer = make_optimizer(job.model, opt.lr, opt.weight_decay, (opt.beta1, opt.beta2), opt.eps)
    scheduler = make_scheduler(optimizer, opt.schedule, opt.warmup_steps, total_steps, opt.min_lr_ratio)
    guard = NonFiniteGuard(run.on_nonfinite)
    start, eval_metrics = 0, {}
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        guard.skipped = state.get("skipped_steps", 0)
        eval_metrics = state.get("eval_metrics", {})
        start = state["step"]
        set_rng_state(state["rng"])
        truncate_metrics(out, start, job.stage)
    announce_resume(ckpt, start, total_steps)
    logger = MetricsLogger(out, job.stage)
    micro = opt.batch_size // opt.grad_accum_steps
    job.model.train()
    bar = progress(total_steps, job.stage, run.progress)
    bar.update(start)
    t0, items_seen = time.perf_counter(), 0
    for step, idx in enumerate(batch_indices(len(job.train), opt.batch_size, total_steps, run.seed, start), start + 1):
        items = [job.train[i] for i in idx.tolist()]
        total_weight = sum(job.weight_of(x) for x in items)
        sums: dict[str, float] = {}
        ok = True
        for lo in range(0, len(items), micro):
            chunk = items[lo : lo + micro]
            loss, stats = job.loss(chunk, sum(job.weight_of(x) for x in chunk) / total_weight)
            if not guard.ok(f"{job.stage} loss", loss, step):
                ok = False
                break
            loss.backward()
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v
        norm = grad_norm(job.model, opt.max_grad_norm) if ok else float("nan")
        if ok and guard.ok("gradient norm", torch.tensor(norm), step):
            optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        items_seen += len(items)
        bar.update(1)
        if "train/loss" in sums:
            bar.set_postfix(loss=f"{sums['train/loss']:.3f}")
        metrics = {}
        if step % run.log_every == 0 or step == total_steps:
            metrics.update(sums)
            metrics.update({"optim/lr": scheduler.get_last_lr()[0], "optim/grad_norm": norm,
                            "optim/skipped_steps": guard.skipped,
                            "perf/examples_per_s": items_seen / (time.perf_counter() - t0)})
        if job.evaluate is not None and (step % cfg.eval_every == 0 or step == total_steps):
            eval_metrics = job.evaluate()
            job.model.train()
            metrics.update(eval_metrics)
        if metrics:
            logger.log(step, metrics)
        if run.save_every and step % run.save_every == 0 and step < total_steps:
            state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                     "skipped_steps": guard.skipped, "eval_metrics": eval_metrics}
            save_checkpoint(out, step, {"model": job.model}, job.tokenizer, state, run.keep_checkpoints)
    bar.close()
    logger.close()
    return eval_metrics


def finish(job: SupervisedJob, out: Path, meta: dict) -> None:
    """Write the final model at the root of the run directory (atomically)."""
    save_final(out, job.model, job.tokenizer, meta)
