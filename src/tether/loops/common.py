"""Pieces every training loop shares: optimiser, schedule, batches, finite checks, final save."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from tether.registry.algorithms import algorithm_spec
from tether.registry.stages import stage_spec
from tether.common.errors import ConfigError
from tether.runs.checkpoint import latest_checkpoint
from tether.distributed.collectives import barrier, on_main
from tether.common.runtime import rank, world_size
from tether.metrics import MetricsLogger
from tether.trackers import check_installed, check_servers
from tether.models.loading import context_length
from tether.runs import (
    MANIFEST,
    atomic_write_dir,
    check_run_dir,
    fault_point,
    remove_stale_temps,
    seed_everything,
    set_threads,
)


def begin_run(cfg, stage: str, resume: bool) -> Path | None:
    """Threads, seeds, a read-only check of ``run.out``; the checkpoint to resume from (or None).

    Inputs are loaded and checked after this and before the run directory is touched, so bad
    input leaves nothing behind.
    """
    check_installed(cfg.run.report_to)  # a tracker asked for and missing: before anything else
    threads, why = set_threads(cfg.run.threads)
    if cfg.run.threads == 0:
        notice(f"{threads} torch thread{'s' if threads > 1 else ''} ({why}).")
    seed_everything(cfg.run.seed)
    check_data_parallel(cfg, stage)

    def check() -> Path | None:
        check_run_dir(cfg.run.out, cfg, stage, cfg.run.overwrite, resume)
        check_servers(cfg.run.report_to)  # the trackers' servers answer in time (tether.common.services)
        return latest_checkpoint(cfg.run.out) if resume else None

    ckpt = on_main(check)  # data parallel: rank 0 checks and picks the checkpoint, every rank follows
    if resume and ckpt is None:
        notice(f"no complete checkpoint in '{cfg.run.out}' yet: the run starts from the beginning.")
    return ckpt


def check_data_parallel(cfg, stage: str) -> None:
    """Under torchrun: every global batch size must split evenly over the ranks (a ConfigError
    naming the key, its value and the world size otherwise); FSDP does not take fp16."""
    world = world_size()
    if world == 1:
        return
    algorithm = stage_spec(stage).algorithm
    if algorithm is not None:
        p = cfg.rl
        episodes = "rollout.batch_size" if cfg.samples_per_prompt == 1 else "rollout.batch_size x group.size"
        sizes = {episodes: cfg.episodes, "rl.minibatch_size": p.minibatch_size,
                 "rl.minibatch_size / rl.grad_accum_steps": p.minibatch_size // p.grad_accum_steps}
        strategies = {cfg.distributed.strategy, cfg.critic.strategy or cfg.distributed.strategy}
    else:
        o = cfg.optim
        sizes = {"optim.batch_size": o.batch_size, "optim.batch_size / optim.grad_accum_steps": o.batch_size // o.grad_accum_steps}
        strategies = {cfg.distributed.strategy}
    for key, value in sizes.items():
        if value % world:
            raise ConfigError(
                f"Config key '{key}' = {value} does not divide by the world size {world} (torchrun's processes): "
                f"each rank takes an equal share of every batch; expected a multiple of {world}.")
    if algorithm is not None and algorithm_spec(algorithm).whole_groups:
        micro, g = cfg.rl.minibatch_size // cfg.rl.grad_accum_steps, cfg.samples_per_prompt
        if (micro // world) % g:
            raise ConfigError(
                f"Config key 'rl.minibatch_size' = {cfg.rl.minibatch_size}: {cfg.algorithm} compares each prompt's "
                f"responses, so each rank's share of a micro-batch (rl.minibatch_size / rl.grad_accum_steps / world "
                f"size = {micro} / {world}) must hold whole groups of group.size = {g}.")
    if "fsdp" in strategies and cfg.run.precision == "fp16":
        raise ConfigError("Config key 'run.precision' = 'fp16' with distributed.strategy (or critic.strategy) = "
                          "'fsdp': FSDP here takes fp32 or bf16 (fp16's gradient scaler is not wired for sharded "
                          "gradients); use bf16, or ddp.")


def announce_resume(ckpt: Path | None, step: int, total: int) -> None:
    """'resuming from step N of M' on stderr when continuing from ``ckpt``."""
    if ckpt is not None:
        notice(f"resuming from step {step} of {total} ({ckpt}).")


def notice(text: str) -> None:
    """One line for the user on stderr (above any progress bar): what tether chose and why
    (rank 0's line alone in a data-parallel run)."""
    if rank() != 0:
        return
    tqdm.write(f"tether: {text}", file=sys.stderr)


@dataclass(frozen=True)
class LengthLimit:
    """A token limit from config, capped at the models' context (``capped_by`` says so, else None)."""

    tokens: int
    capped_by: str | None = None


def smallest_context(models: dict[str, object]) -> tuple[int | None, str]:
    """The smallest context length (positions) among ``models`` (name -> a length, None, or a model
    or config to read it from), and its name."""
    lengths = [(m if isinstance(m, int) or m is None else context_length(m), name) for name, m in models.items()]
    known = [(n, name) for n, name in lengths if n is not None]
    return min(known) if known else (None, "")


def fit_to_context(value: int, key: str, models: dict[str, object], reserved: int = 0,
                   reserved_key: str | None = None) -> LengthLimit:
    """The limit ``value`` of config ``key``, capped so that it plus ``reserved`` tokens (config
    ``reserved_key``) fit in the smallest context of ``models``.

    A learned position table fails past its end (GPT-2: an IndexError deep in the model) and
    rotary positions were never trained there, so no sequence may outgrow the context. A
    ``reserved`` that leaves no room at all is a :class:`ConfigError` naming both keys.
    """
    context, name = smallest_context(models)
    if context is None or value + reserved <= context:
        return LengthLimit(value)
    room = context - reserved
    if room < 1:
        raise ConfigError(
            f"Config key '{reserved_key}' = {reserved}: that many tokens alone fill the context of the model "
            f"'{name}' ({context} positions); expected at most {context - 1}, so that a prompt fits too."
        )
    reserved_text = f" minus {reserved_key}={reserved}" if reserved else ""
    return LengthLimit(room, f"capped from {key}={value}: the context of the model '{name}' is {context} "
                             f"positions{reserved_text}")


def data_limit(cfg, models: dict[str, object]) -> LengthLimit:
    """``data.max_length`` of a supervised stage (SFT, reward model, DPO) fitted to ``models``
    (path -> config): what its rows are tokenized to, and what its card and config.yaml report."""
    return fit_to_context(cfg.data.max_length, "data.max_length", models)


def log_data_counts(out: Path, stage: str, counts: dict) -> None:
    """Step-0 row of ``metrics.jsonl``: how many examples were used, dropped, truncated."""
    with MetricsLogger(out, stage) as logger:
        logger.log(0, {f"data/{k}": v for k, v in counts.items()})


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled order of epoch ``epoch``: a pure function of (seed, epoch)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))


def batch_indices(n: int, batch_size: int, total_steps: int, seed: int, start_step: int = 0):
    """Index batches for steps ``start_step .. total_steps-1``, reshuffled every epoch.

    The order depends only on (seed, step), so resuming at a step needs no saved cursor.
    The last batch of an epoch may be smaller.
    """
    per_epoch = math.ceil(n / batch_size)
    order, order_epoch = None, -1
    for step in range(start_step, total_steps):
        epoch, k = divmod(step, per_epoch)
        if epoch != order_epoch:
            order, order_epoch = epoch_order(n, seed, epoch), epoch
        yield order[k * batch_size : (k + 1) * batch_size]


def progress(total: int, desc: str, enabled: bool):
    return tqdm(total=total, desc=desc, disable=not enabled or rank() != 0, file=sys.stderr, dynamic_ncols=True, leave=False)


def save_final(out: str | Path, model, tokenizer, meta: dict | None = None, card: str | None = None) -> None:
    """Put a ``save_pretrained`` checkpoint at the root of the run directory, with ``card`` (the
    model card, :func:`tether.runs.cards.model_card`) as its ``README.md``.

    The files are staged atomically, the old manifest removed first and the new one written
    last, so ``tether_checkpoint.json`` present means the checkpoint at ``out`` is whole.
    """
    out = Path(out)
    if rank() != 0:  # data parallel: the model gathers its weights for rank 0, which writes
        export = getattr(model, "export", None)
        export(None) if export is not None else model.save_pretrained(None)
        barrier()
        return
    (out / MANIFEST).unlink(missing_ok=True)
    remove_stale_temps(out)  # a save killed earlier left its staging directories here

    def write(tmp: Path) -> None:
        # Engines and roles export their final form (a LoRA model merged, its adapter beside it).
        export = getattr(model, "export", None)
        export(tmp) if export is not None else model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if card is not None:
            (tmp / "README.md").write_text(card, encoding="utf-8")

    staged = atomic_write_dir(out / ".final-staging", write, meta)
    for path in sorted(staged.iterdir(), key=lambda p: p.name == MANIFEST):
        target = out / path.name
        if target.is_dir() and not target.is_symlink():  # a rerun's adapter/ or critic/: rename cannot replace it
            shutil.rmtree(target)
        os.replace(path, target)
        fault_point("final-move")
    staged.rmdir()
    barrier()


def steps_for(n_examples: int, batch_size: int, epochs: float, max_steps: int | None) -> int:
    if max_steps:
        return max_steps
    return max(1, math.ceil(epochs * n_examples / batch_size))


class Timer:
    """Seconds per named span, summed; safe to use from the role threads (their spans add up)."""

    def __init__(self):
        self.times: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float) -> None:
        with self._lock:
            self.times[f"timing/{name}"] = self.times.get(f"timing/{name}", 0.0) + seconds

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)
