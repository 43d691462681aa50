"""Run directories: the resolved config, seeding, threads, atomic checkpoint writes."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import random
import shutil
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from tether.config import from_dict, rebase_paths, to_dict
from tether.config.saved import SAVED_STAGE, SAVED_WORKDIR
from tether.common.errors import ConfigError
from tether.common.outputs import check_output_dir

MANIFEST = "tether_checkpoint.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(threads: int) -> tuple[int, str]:
    """Set torch's CPU threads: ``threads``, or with 0 as many as there are free cores.

    torch's default (one thread per core) falls off a cliff beside a busy process: OpenMP's
    threads wait for the one that shares a core (PPO iterations 10-20x slower with one busy
    neighbour on 2 cores, DEMO_TASK_NOTES). So 0 counts the cores other processes keep busy
    over a short sample and leaves those out. Returns (threads, why) for the run's log.
    """
    if threads > 0:
        torch.set_num_threads(threads)
        return threads, f"run.threads={threads}"
    default = torch.get_num_threads()
    if default == 1:
        return 1, "run.threads=0: torch's default here is 1"
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = busy_cores()
    chosen = threads_for(available, busy, default)
    torch.set_num_threads(chosen)
    seen = "busy cores not measurable here" if busy is None else f"{busy:.1f} of {available} cores busy"
    return chosen, f"run.threads=0: {seen}"


def threads_for(available: int, busy: float | None, default: int) -> int:
    """Threads for ``available`` cores of which ``busy`` are used by other processes (None: unknown).

    Busy time is counted in whole cores, a fraction of 0.7 or more making one (a neighbour
    at 40 % of a core still leaves that core to torch); at least 1, at most torch's ``default``.
    """
    if busy is None:
        return max(1, default)
    free = available - int(busy + 0.3)
    return max(1, min(default, free))


def busy_cores(interval: float = 0.25) -> float | None:
    """Cores kept busy by all processes over ``interval`` seconds (this one sleeps meanwhile), from
    ``/proc/stat``; None where there is no such file."""
    import time

    def sample() -> tuple[int, int, int] | None:
        try:
            with open("/proc/stat", encoding="ascii") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        values = [int(v) for v in lines[0].split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values), idle, cpus

    first = sample()
    if first is None:
        return None
    time.sleep(interval)
    second = sample()
    total, idle = second[0] - first[0], second[1] - first[1]
    if total <= 0:
        return None
    return (total - idle) / total * second[2]


class RunDir(type(Path())):
    """A prepared run directory: its path, and the experiment trackers (``run.report_to``) its
    metrics go to in ``trackers`` (None: none asked for, or not rank 0).

    :func:`prepare_run_dir` returns one; a :class:`~tether.metrics.MetricsLogger` built on it logs
    to its trackers, and :func:`guarded_run` closes them when the stage returns or fails (outside
    ``guarded_run`` the caller closes them). It is a ``Path`` everywhere else; paths derived from
    it (``out / name``, a copy, a pickled one) hold no trackers.
    """

    trackers = None


def prepare_run_dir(out: str | Path, cfg, stage: str, overwrite: bool = False, resume: bool = False,
                    limits: dict | None = None) -> RunDir:
    """Create ``out``, save the resolved config as ``out/config.yaml`` and open the run's trackers
    (:class:`RunDir`).

    A directory holding a different run (another stage or config) is refused unless
    ``overwrite``: a user must never silently mix two runs' metrics and checkpoints.
    Without ``resume`` the run starts fresh: old metrics and checkpoints are removed.
    ``limits`` (config key -> LengthLimit): the lengths the run uses; those the models' context
    capped are noted at the top of config.yaml (:func:`capped_header`).
    """
    from tether.common.runtime import is_main

    if not is_main():  # data parallel: rank 0 alone writes (begin_run checked the directory on rank 0)
        return RunDir(Path(out).expanduser())
    out = check_run_dir(out, cfg, stage, overwrite, resume)
    guard = _PREPARED.get()
    record = None
    if guard is not None:
        config = out / "config.yaml"
        record = _Prepared(out, out.exists(), config.read_bytes() if config.is_file() else None)
        guard.append(record)
    # The launch directory: relative input paths in the config are relative to it (--resume).
    resolved = {SAVED_STAGE: stage, SAVED_WORKDIR: os.getcwd(), **to_dict(cfg)}
    existing = out / "config.yaml"
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in ("metrics.jsonl", "summary.json", "alarms.jsonl", "samples.jsonl", "trackers.json", MANIFEST):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
        shutil.rmtree(out / "tensorboard", ignore_errors=True)  # a fresh run's curves alone
    tmp = out / "config.yaml.tmp"
    tmp.write_text(capped_header(limits) + yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    os.replace(tmp, existing)
    from tether.trackers import open_trackers

    run_dir = RunDir(out)
    run_dir.trackers = open_trackers(out, cfg, stage, resume)  # run.report_to's
    if record is not None:
        record.trackers = run_dir.trackers  # guarded_run closes them
    return run_dir


def capped_header(limits: dict | None) -> str:
    """YAML comment lines naming the limits the models' context capped, and what ran ("" if none).

    The values below them stay as configured: config.yaml is what ``--resume`` reads (which caps
    them again) and what a rerun is compared with, so a capped value there would make the same
    command look like a different run.
    """
    from tether.runs.cards import capped_values

    capped = capped_values(limits)
    if not capped:
        return ""
    lines = [f"#   {key}: {value}" for key, value in capped.items()]
    return "\n".join(["# What ran differs from the configured values below where the models' context capped them:",
                      *lines, ""])


def _same_run(old: dict | None, new: dict, cls: type) -> bool:
    """Two resolved configs describe the same run: equal but for where the run lives (``run.out``)
    and where it was started from (relative input paths are compared as the paths they meant),
    so a moved or copied run directory, resumed from anywhere, is still its own run."""
    if not isinstance(old, dict):
        return False

    def normal(data: dict) -> dict:
        base = data.get(SAVED_WORKDIR) or os.getcwd()
        body = {k: v for k, v in data.items() if k not in (SAVED_WORKDIR, SAVED_STAGE)}
        try:
            # Canonical form: keys renamed since (MOVED_KEYS) and defaults of keys added since.
            body = rebase_paths(cls, to_dict(from_dict(cls, body, notices=False)), base)
        except Exception:  # noqa: BLE001 - a hand-edited config of the wrong shape is simply not this run
            return {"unreadable": True}
        run = body.get("run")
        if isinstance(run, dict):
            body["run"] = {k: v for k, v in run.items() if k != "out"}
        return {SAVED_STAGE: data.get(SAVED_STAGE), **body}

    return normal(old) == normal(new)


def check_run_dir(out: str | Path, cfg, stage: str, overwrite: bool = False, resume: bool = False) -> Path:
    """Refuse (read-only) a directory that holds a different run, before any work is done."""
    out = Path(out)
    resolved = {SAVED_STAGE: stage, **to_dict(cfg)}
    existing = out / "config.yaml"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"Output directory '{out}' is a file, not a directory. Choose another run.out.")
    # Missing parents are created (runs/ on a first run); a file above or no write access is refused now.
    check_output_dir(out, "run.out", what=f"Config key 'run.out' = '{out}'")
    if existing.exists():
        try:
            old = yaml.safe_load(existing.read_text(encoding="utf-8")) or {}
        except Exception:  # noqa: BLE001 - an unreadable config.yaml is not this run's
            old = None
        if not _same_run(old, resolved, type(cfg)) and (resume or not overwrite):
            raise ConfigError(
                f"Output directory '{out}' already holds a different run (its config.yaml "
                "differs). Choose another run.out, or set run.overwrite=true to replace it."
            )
    elif out.exists() and any(out.iterdir()) and not overwrite:
        raise ConfigError(
            f"Output directory '{out}' is not empty and holds no tether run. Choose another "
            "run.out, or set run.overwrite=true to write into it."
        )
    return out


def resumable(out: str | Path) -> bool:
    """``out`` holds something a run can continue from: a finished run or a complete checkpoint."""
    out = Path(out)
    ckpts = out / "checkpoints"
    return (out / MANIFEST).is_file() or (ckpts.is_dir() and any((p / MANIFEST).is_file() for p in ckpts.iterdir()))


RUN_FILES = ("metrics.jsonl", "samples.jsonl", "alarms.jsonl", "summary.json", "config.yaml.tmp")


@dataclass
class _Prepared:
    """What :func:`prepare_run_dir` found before it wrote: enough to take its writes back."""

    out: Path
    existed: bool
    old_config: bytes | None
    trackers: object = None  # the trackers it opened (tether.trackers.Trackers), closed with the stage


_PREPARED: contextvars.ContextVar[list | None] = contextvars.ContextVar("tether_prepared_run_dirs", default=None)


@contextlib.contextmanager
def removed_on_early_failure():
    """Around a stage: an exception before anything resumable was written removes what the run
    created in the directories :func:`prepare_run_dir` prepared meanwhile, so a failed start
    never leaves a directory that blocks the corrected rerun.

    A directory that did not exist is removed; in one that did, the run's files go and the
    previous ``config.yaml`` comes back. A directory refused before it was prepared (another
    run's) is never touched; Ctrl-C and a finished run or checkpoint keep everything.

    The trackers those directories opened are closed when the block ends, first (marked failed
    on any exception, Ctrl-C included), so none is left running and none writes into a directory
    being taken back.
    """
    prepared: list[_Prepared] = []
    token = _PREPARED.set(prepared)
    try:
        yield
    except BaseException as err:
        _close_trackers(prepared, failed=True)
        if isinstance(err, Exception):
            for p in prepared:
                if p.out.is_dir() and not resumable(p.out):
                    _take_back(p)
        raise
    else:
        _close_trackers(prepared, failed=False)
    finally:
        _PREPARED.reset(token)


def _close_trackers(prepared: list[_Prepared], failed: bool) -> None:
    for p in prepared:
        if p.trackers is not None:
            p.trackers.close(failed)


def _take_back(p: _Prepared) -> None:
    if not p.existed:
        shutil.rmtree(p.out, ignore_errors=True)
        return
    for name in RUN_FILES:
        (p.out / name).unlink(missing_ok=True)
    shutil.rmtree(p.out / "checkpoints", ignore_errors=True)
    remove_stale_temps(p.out)
    if p.old_config is None:
        (p.out / "config.yaml").unlink(missing_ok=True)
    else:
        (p.out / "config.yaml").write_bytes(p.old_config)


def guarded_run(stage_fn):
    """Decorate a stage ``fn(cfg, ...)``: it runs inside :func:`removed_on_early_failure` (which
    also closes the trackers its run directories opened) and, launched by torchrun, inside its
    process group."""

    @functools.wraps(stage_fn)
    def run(cfg, *args, **kwargs):
        from tether.distributed import init_distributed

        # Under torchrun: the process group for the stage, and a lost rank named when a collective fails.
        with init_distributed(cfg.run.device, getattr(cfg, "distributed", None)), removed_on_early_failure():
            return stage_fn(cfg, *args, **kwargs)

    return run


def remove_stale_temps(directory: str | Path) -> None:
    """Temporary directories a killed atomic write left in ``directory`` (``.NAME.tmp-*``, the
    final model's ``.final-staging``): never part of a run, removed before new writes."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if path.is_dir() and (path.name.startswith(".") and ".tmp-" in path.name or path.name == ".final-staging"):
            shutil.rmtree(path, ignore_errors=True)


def atomic_write_dir(final: str | Path, write: Callable[[Path], None], meta: dict | None = None) -> Path:
    """Write a directory atomically: into a temp sibling, fsync, manifest last, then rename.

    A crash at any point leaves either the previous complete directory or no directory at
    ``final``; a directory without ``tether_checkpoint.json`` is never complete.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        write(tmp)
        fault_point("checkpoint-write")
        _fsync_tree(tmp)
        manifest = {"files": sorted(p.name for p in tmp.iterdir()), **(meta or {})}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        with open(tmp / MANIFEST, "rb") as f:
            os.fsync(f.fileno())
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def fault_point(name: str) -> None:
    """Fault injection for the kill tests: ``TETHER_FAULT=NAME:K`` SIGKILLs this process the
    K-th time it reaches the point ``NAME`` (a crash at the worst moment, deterministically);
    ``NAME:K@R`` only the process of rank ``R`` (torchrun's ``RANK``)."""
    spec = os.environ.get("TETHER_FAULT")
    if not spec or not spec.startswith(name + ":"):
        return
    spec, _, only_rank = spec.partition("@")
    if only_rank and os.environ.get("RANK", "0") != only_rank:
        return
    count = _FAULT_COUNTS.get(name, 0) + 1
    _FAULT_COUNTS[name] = count
    if count == int(spec.split(":", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)


# The fault-injection hook's counters (tests only, TETHER_FAULT): per process, as the kill they time.
_FAULT_COUNTS: dict[str, int] = {}


def _fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` to disk before the rename makes it visible."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())


def write_json(path: str | Path, data: dict) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)
