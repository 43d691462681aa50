"""The skeleton every stage runs inside: SFT, the reward model, DPO and the RL algorithms are bodies.

:func:`run_stage` owns what the stages share: the run's start (threads, seeds, the read-only
check of ``run.out`` and the checkpoint to resume from), the run directory (created only after
the body's inputs are checked, so bad input leaves nothing behind), the placement's lifetime,
and the end: each final model saved with its model card. A body supplies what differs:
``start(cfg, checkpoint) -> Started`` (its roles placed and its inputs read and checked) and
``train(cfg, started, out, checkpoint) -> (result, finals)`` (its loop, with logging,
evaluation, checkpoints and exact resume; the :class:`Final` models to save).

:class:`StageBody` is the supervised stages' body (each method's in :mod:`tether.objectives`): one
trained role (a :class:`~tether.roles.supervised.SupervisedModel`), placed in this process or on a
Ray worker (``placement.backend``) that rebuilds the same inputs and model from the config (the
same seed, so the same initial weights); the loop sends it the row indices of each batch
(:func:`tether.loops.supervised.train_supervised`). The RL stages' body is
:class:`tether.loops.rl_run.RLBody`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.runs.cards import model_card
from tether.engines import engine_settings
from tether.loops.common import begin_run, log_data_counts, save_final, steps_for
from tether.loops.supervised import SupervisedJob, padded_tokens, sequence_tokens, train_supervised
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

    def start(self, cfg, checkpoint: Path | None) -> "Started":
        """Check the device, read and check the inputs, place the trained role."""
        engine_settings(cfg.run, cfg.model, getattr(cfg, "cpu", None))  # run.device naming a device this machine lacks: refused before any input is read
        inputs = self.inputs(cfg)
        total_steps = steps_for(len(inputs.train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
        placement, built = place(cfg, self, checkpoint, inputs, total_steps)
        return Started(placement, inputs.tokenizer, inputs.limits,
                       {"inputs": inputs, "built": built, "total_steps": total_steps})

    def train(self, cfg, started: "Started", out: Path, checkpoint: Path | None) -> tuple[dict, list["Final"]]:
        """The step-0 data counts, the optimisation loop, ``finish``; the trained model as the final one.
        Returns the last evaluation, ``steps``, ``time_s``, what ``finish`` returned, the tokenizer
        and, when the model trained in this process, its engine."""
        inputs, built, total_steps = (started.state[k] for k in ("inputs", "built", "total_steps"))
        if checkpoint is None:
            train_name, eval_name = self.counted
            log_data_counts(out, self.name, {train_name: len(inputs.train), eval_name: len(inputs.evals),
                                             **inputs.counts})
        trained = role(started.placement, self.role)
        train = inputs.train
        job = SupervisedJob(stage=self.name, trained=trained, tokenizer=inputs.tokenizer, rows=len(train),
                            tokens_of=lambda i: sequence_tokens(train[i]), evaluate=bool(inputs.evals),
                            padded_tokens_of=lambda i: padded_tokens(train[i]))
        t0 = time.perf_counter()
        eval_metrics = train_supervised(job, cfg, out, total_steps, checkpoint)
        extra = self.finish(trained, cfg, eval_metrics, out, total_steps) if self.finish else {}
        final = Final(trained, {"stage": self.name, "steps": total_steps},
                      {**eval_metrics, "steps": total_steps, **extra}, role=self.card_role)
        engine = getattr(built.roles[self.role], "engine", None) if built is not None else None
        return ({**eval_metrics, "steps": total_steps, "time_s": time.perf_counter() - t0, **extra,
                 "engine": engine, "tokenizer": inputs.tokenizer}, [final])


def place(cfg, body: StageBody, checkpoint: Path | None, inputs: StageInputs, total_steps: int):
    """(the placement serving the body's role, the roles built in this process or None)."""
    if cfg.placement.backend == "ray":
        build = f"{body.build.__module__}:{body.build.__qualname__}"
        return make_stage_placement(cfg, body.role, build, checkpoint, inputs.tokenizer.pad_token_id), None
    built = body.build(cfg, checkpoint, inputs=inputs, total_steps=total_steps)
    return LocalPlacement(built.placed()), built


@dataclass
class Started:
    """What a body's ``start`` leaves for its ``train``: the placement serving its roles (closed by
    the skeleton), the tokenizer saved with every final model, the limits ``config.yaml`` and the
    cards report, and the body's own state (its inputs, built roles, ...)."""

    placement: object
    tokenizer: object
    limits: dict
    state: dict = field(default_factory=dict)


@dataclass
class Final:
    """A model the stage saves at its end: ``trained`` (a role proxy) at ``run.out/subdir`` ("" =
    the run directory itself) with ``meta`` in its manifest and a model card of ``metrics`` for
    ``role`` ("policy", "reward", "critic")."""

    trained: object
    meta: dict
    metrics: dict
    role: str = "policy"
    subdir: str = ""


def run_stage(cfg, body, resume: bool = False) -> dict:
    """Run ``body`` from start (or from the newest complete checkpoint in ``run.out`` with
    ``resume``) to its final saves; returns what the body's ``train`` returned."""
    ckpt = begin_run(cfg, body.name, resume)
    started = body.start(cfg, ckpt)
    try:
        out = prepare_run_dir(cfg.run.out, cfg, body.name, cfg.run.overwrite, resume=ckpt is not None,
                              limits=started.limits)
        result, finals = body.train(cfg, started, out, ckpt)
        for final in finals:
            where = out / final.subdir if final.subdir else out
            card = model_card(cfg, body.name, final.metrics, where, role=final.role, limits=started.limits)
            save_final(where, final.trained, started.tokenizer, final.meta, card)
        return result
    finally:
        started.placement.close()
