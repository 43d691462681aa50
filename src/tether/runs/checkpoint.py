"""Training checkpoints: everything needed to continue a run exactly, written atomically.

Layout: ``RUN/checkpoints/step-000120/`` holding one ``save_pretrained`` directory per model
(``model/``, or ``actor/`` and ``critic/``), ``trainer_state.pt`` (optimisers, schedulers,
controllers, RNG states, counters) and ``tether_checkpoint.json`` written last. A directory
without that manifest is incomplete and ignored; only the last ``keep`` complete ones stay.
"""

from __future__ import annotations

import json
import random
import sys
import shutil
from pathlib import Path

import numpy as np
import torch

from tether.distributed.collectives import all_gather_objects, barrier
from tether.common.errors import TetherError
from tether.runs import MANIFEST, atomic_write_dir
from tether.common.runtime import rank, world_size

CHECKPOINTS = "checkpoints"


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def set_rank_rng_state(state: dict) -> None:
    """This rank's RNG state from a checkpoint's: its own when the world size is the one that wrote
    it; otherwise (a different world size) rank 0's state, reseeded per rank by the loops."""
    per_rank = state.get("rng_ranks")
    if per_rank is not None and len(per_rank) == world_size():
        set_rng_state(per_rank[rank()])
        return
    set_rng_state(state["rng"])
    written = state.get("world_size", 1)
    if written != world_size() and rank() == 0:
        from tqdm.auto import tqdm

        tqdm.write(f"tether: this checkpoint was written by {written} process(es) and resumes in {world_size()}: "
                   "weights, optimiser and schedule continue exactly; each rank now takes a different share of "
                   "every batch and draws from its own (seed, iteration, rank) stream, so sampled rollouts differ "
                   f"from an uninterrupted {written}-process run.", file=sys.stderr)


def _assert_finite(models: dict) -> None:
    """Every weight finite on every rank (under FSDP each rank checks its own shards)."""
    from tether.engines.training import first_nonfinite

    bad = None
    for name, model in models.items():
        # Roles and engines check their own weights where they live (a Ray worker, this rank's shards).
        found = model.nonfinite() if hasattr(model, "nonfinite") else first_nonfinite(model.named_parameters())
        if found is not None:
            bad = (name, found)
            break
    found = all_gather_objects(bad)
    bad = next((b for b in found if b is not None), None)
    if bad is not None:
        raise TetherError(
            f"Refusing to write a checkpoint: {bad[0]} parameter '{bad[1]}' holds NaN/Inf. "
            "The previous complete checkpoint is kept."
        )


def save_checkpoint(run_dir: str | Path, step: int, models: dict, tokenizer, state: dict, keep: int = 2) -> Path:
    """Write ``RUN/checkpoints/step-N`` atomically, then prune to the last ``keep``.

    ``models``: name -> anything with ``save_pretrained(dir)`` and ``nonfinite()`` (a role or
    an engine) or ``named_parameters()`` (a model).

    Data parallel: called on every rank (``state`` already gathered: rank 0's is whole); the
    models gather their weights to rank 0 (``save_pretrained(None)`` on the others), which alone
    writes; every rank's RNG state is kept; all ranks leave when the checkpoint is complete.
    """
    _assert_finite(models)
    final = Path(run_dir) / CHECKPOINTS / f"step-{step:06d}"
    rngs = all_gather_objects(rng_state())
    if rank() != 0:
        for model in models.values():
            model.save_pretrained(None)
        barrier()
        return final

    def write(tmp: Path) -> None:
        for name, model in models.items():
            model.save_pretrained(tmp / name)
            tokenizer.save_pretrained(tmp / name)
        torch.save({**state, "rng": rngs[0], "rng_ranks": rngs, "world_size": len(rngs), "step": step},
                   tmp / "trainer_state.pt")

    atomic_write_dir(final, write, {"step": step, "models": sorted(models)})
    prune(run_dir, keep)
    barrier()
    return final


def complete_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-") and (p / MANIFEST).is_file()]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def prune(run_dir: str | Path, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; remove stale temp dirs of killed writes."""
    complete = complete_checkpoints(run_dir)
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    root = Path(run_dir) / CHECKPOINTS
    for tmp in root.glob(".step-*.tmp-*"):
        shutil.rmtree(tmp, ignore_errors=True)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = complete_checkpoints(run_dir)
    return found[-1] if found else None


def load_trainer_state(ckpt: Path) -> dict:
    manifest = json.loads((ckpt / MANIFEST).read_text(encoding="utf-8"))
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    if state.get("step") != manifest.get("step"):
        raise TetherError(f"Checkpoint '{ckpt}' is inconsistent: manifest and trainer state disagree on the step.")
    return state


def truncate_jsonl(path: str | Path, step: int, stage: str | None = None, key: str | None = None) -> None:
    """Drop rows logged after ``step`` (of ``stage`` if given): a resumed run rewrites them.

    The step is read from ``key``, else ``step``, else ``iteration``. Lines cut by a kill are dropped.
    """
    path = Path(path)
    if not path.exists() or rank() != 0:  # data parallel: rank 0 alone writes
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        row_step = row.get(key) if key else row.get("step", row.get("iteration", 0))
        if (stage is None or row.get("stage") == stage) and (row_step or 0) > step:
            continue
        kept.append(line)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
    tmp.replace(path)


def truncate_metrics(run_dir: str | Path, step: int, stage: str) -> None:
    """Drop ``metrics.jsonl`` rows of ``stage`` logged after ``step``."""
    truncate_jsonl(Path(run_dir) / "metrics.jsonl", step, stage)
