"""Run directories: the resolved config, seeding, threads, atomic checkpoint writes."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import yaml

from tether.config import to_dict
from tether.errors import ConfigError

MANIFEST = "tether_checkpoint.json"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """0 keeps torch's default; the demo notes show 1 thread is immune to a busy neighbour."""
    if threads > 0:
        torch.set_num_threads(threads)


def prepare_run_dir(out: str | Path, cfg, stage: str, overwrite: bool = False, resume: bool = False) -> Path:
    """Create ``out`` and save the resolved config as ``out/config.yaml``.

    A directory holding a different run (another stage or config) is refused unless
    ``overwrite``: a user must never silently mix two runs' metrics and checkpoints.
    Without ``resume`` the run starts fresh: old metrics and checkpoints are removed.
    """
    out = check_run_dir(out, cfg, stage, overwrite, resume)
    resolved = {"stage": stage, **to_dict(cfg)}
    existing = out / "config.yaml"
    out.mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in ("metrics.jsonl", "summary.json", "alarms.jsonl", "samples.jsonl", MANIFEST):
            (out / name).unlink(missing_ok=True)
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    tmp = out / "config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")
    os.replace(tmp, existing)
    return out


def check_run_dir(out: str | Path, cfg, stage: str, overwrite: bool = False, resume: bool = False) -> Path:
    """Refuse (read-only) a directory that holds a different run, before any work is done."""
    out = Path(out)
    resolved = {"stage": stage, **to_dict(cfg)}
    existing = out / "config.yaml"
    if out.exists() and not out.is_dir():
        raise ConfigError(f"Output directory '{out}' is a file, not a directory. Choose another run.out.")
    if existing.exists():
        try:
            old = yaml.safe_load(existing.read_text(encoding="utf-8")) or {}
        except Exception:  # noqa: BLE001 - an unreadable config.yaml is not this run's
            old = None
        if old != resolved and (resume or not overwrite):
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
    K-th time it reaches the point ``NAME`` (a crash at the worst moment, deterministically)."""
    spec = os.environ.get("TETHER_FAULT")
    if not spec or not spec.startswith(name + ":"):
        return
    count = _FAULT_COUNTS.get(name, 0) + 1
    _FAULT_COUNTS[name] = count
    if count == int(spec.split(":", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)


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
