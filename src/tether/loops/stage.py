"""The skeleton every supervised stage runs inside: SFT, the reward model and DPO are bodies.

:func:`run_stage` owns what the stages used to repeat: the run's start (threads, seeds, the
read-only check of ``run.out`` and the checkpoint to resume from), the placement of the trained
model's role (this process, or a Ray worker: ``placement.backend``), the run directory and its
data-count row, the optimisation loop with its logging, evaluation, checkpoints and exact resume
(:func:`tether.loops.supervised.train_supervised`), the model card and the final save. A body
(:class:`StageBody`) supplies only what differs: its inputs (tokenizer, rows, counts), the
function that builds its role where the role runs, and what it does after the last step (the
reward model's offset).

The loop talks to the trained model only through its role proxy, so a body runs unchanged on
any placement: under ``placement.backend=ray`` the role's worker rebuilds the same inputs and
model from the config (the same seed, so the same initial weights) and the loop sends it the
row indices of each batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.cards import model_card
from tether.engines import engine_settings
from tether.loops.common import begin_run, log_data_counts, save_final, steps_for
from tether.loops.supervised import SupervisedJob, sequence_tokens, train_supervised
from tether.placement import LocalPlacement, make_stage_placement, role
from tether.runs import prepare_run_dir


@dataclass
class StageInputs:
    """What a stage reads before the weights, checked (``--dry-run`` stops here): the tokenizer,
    the training and held-out rows, the data counts logged at step 0, the limits the card and
    ``config.yaml`` report, and anything else the body's role needs (the RM's margins)."""

    tokenizer: object
    train: list
    evals: list
    counts: dict
    limits: dict
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StageBody:
    """A supervised stage inside the skeleton.

    ``name``: the stage (run directory, metrics, card); ``role``: the trained model's role name
    (``placement.ray.roles.<role>`` under Ray); ``inputs(cfg)``: :class:`StageInputs`;
    ``build(cfg, checkpoint, inputs=None, total_steps=None)``: the stage's roles
    (:class:`tether.roles.supervised.StageRoles`), built where they run; without ``inputs`` (a
    Ray worker) it reads them itself. It must be a module-level function (a worker imports it by
    name). ``counted``: the names of the train and held-out counts in the step-0 row.
    ``finish(trained, cfg, eval_metrics, out, total_steps) -> dict``: after the last step;
    what it returns goes into the card's metrics and the result. ``card_role``: the card's role.
    """

    name: str
    role: str
    inputs: Callable
    build: Callable
    counted: tuple[str, str]
    finish: Callable | None = None
    card_role: str = "policy"


def place(cfg, body: StageBody, checkpoint: Path | None, inputs: StageInputs, total_steps: int):
    """(the placement serving the body's role, the roles built in this process or None)."""
    if cfg.placement.backend == "ray":
        build = f"{body.build.__module__}:{body.build.__qualname__}"
        return make_stage_placement(cfg, body.role, build, checkpoint, inputs.tokenizer.pad_token_id), None
    built = body.build(cfg, checkpoint, inputs=inputs, total_steps=total_steps)
    return LocalPlacement(built.placed()), built


def run_stage(cfg, body: StageBody, resume: bool = False) -> dict:
    """Run ``body`` from start (or from the newest complete checkpoint in ``run.out`` with
    ``resume``) to its final save; returns the last evaluation, ``steps``, ``time_s``, what
    ``finish`` returned, the tokenizer and, when the model trained in this process, its engine."""
    ckpt = begin_run(cfg, body.name, resume)
    engine_settings(cfg)  # run.device naming a device this machine lacks: refused before any input is read
    inputs = body.inputs(cfg)
    total_steps = steps_for(len(inputs.train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    placement, built = place(cfg, body, ckpt, inputs, total_steps)
    try:
        out = prepare_run_dir(cfg.run.out, cfg, body.name, cfg.run.overwrite, resume=ckpt is not None,
                              limits=inputs.limits)
        if ckpt is None:
            train_name, eval_name = body.counted
            log_data_counts(out, body.name, {train_name: len(inputs.train), eval_name: len(inputs.evals),
                                             **inputs.counts})
        trained = role(placement, body.role)
        train = inputs.train
        job = SupervisedJob(stage=body.name, trained=trained, tokenizer=inputs.tokenizer, rows=len(train),
                            tokens_of=lambda i: sequence_tokens(train[i]), evaluate=bool(inputs.evals))
        t0 = time.perf_counter()
        eval_metrics = train_supervised(job, cfg, out, total_steps, ckpt)
        extra = body.finish(trained, cfg, eval_metrics, out, total_steps) if body.finish else {}
        card = model_card(cfg, body.name, {**eval_metrics, "steps": total_steps, **extra}, out,
                          role=body.card_role, limits=inputs.limits)
        save_final(out, trained, inputs.tokenizer, {"stage": body.name, "steps": total_steps}, card)
        engine = getattr(built.roles[body.role], "engine", None) if built is not None else None
        return {**eval_metrics, "steps": total_steps, "time_s": time.perf_counter() - t0, **extra,
                "engine": engine, "tokenizer": inputs.tokenizer}
    finally:
        placement.close()
