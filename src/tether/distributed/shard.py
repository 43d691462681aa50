"""How a batch is split over ranks and put back together.

Training batches split evenly (their sizes are checked to divide by the world size). Work that
only reads (sampling, log-probs, values, scores) splits any batch: the rows are padded to a
multiple of the world size by repeating the last one, every rank gets the same number of
rows (so collectives inside stay in step), and the padding is dropped when the results are
gathered back in rank order — the same rows, in the same order, as one process would hold.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from tether.distributed.collectives import active, all_gather_objects
from tether.common.runtime import rank, world_size
from tether.types import select_rows, to_device


def rank_slice(n: int, rank_index: int | None = None, world: int | None = None) -> slice:
    """Rank ``rank_index``'s contiguous share of ``n`` rows: ceil(n / world) each, the last ranks
    taking fewer (possibly none: an empty slice) when ``n`` does not divide by the world size."""
    r = rank() if rank_index is None else rank_index
    w = world_size() if world is None else world
    per = -(-n // w)
    return slice(min(r * per, n), min((r + 1) * per, n))


def take(rows, part: slice):
    """Rows ``part`` of a list or a record (dataclass of per-row tensors and lists)."""
    if isinstance(rows, (list, tuple, Tensor)):
        return rows[part]
    return select_rows(rows, torch.arange(part.start, part.stop))


def shard_rows(rows, n: int, rank_index: int | None = None, world: int | None = None) -> tuple[object, int]:
    """Rank ``rank_index``'s (default: this process's) share of ``n`` rows (a list or a record),
    padded to an even split over ``world`` ranks; returns (the share, the padded total)."""
    w = world_size() if world is None else world
    r = rank() if rank_index is None else rank_index
    padded = -(-n // w) * w
    if padded != n:
        extra = padded - n
        if isinstance(rows, (list, tuple)):
            rows = list(rows) + [rows[-1]] * extra
        else:
            rows = select_rows(rows, torch.cat([torch.arange(n), torch.full((extra,), n - 1)]))
    return take(rows, rank_slice(padded, r, w)), padded


def strided(items: list) -> list:
    """This rank's every world-size-th item (uneven shares: for work without collectives inside)."""
    return items[rank()::world_size()]


def concat(parts: list):
    """Results of several ranks, in rank order: tensors along dim 0, tuples and lists element by
    element... of per-row results, ``None`` as ``None``."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.cat(parts)
    if isinstance(first, tuple):
        return tuple(concat([p[i] for p in parts]) for i in range(len(first)))
    if isinstance(first, list):
        return [x for p in parts for x in p]
    raise TypeError(f"cannot gather results of type {type(first).__name__}")


def head(value, n: int):
    """The first ``n`` rows of a gathered result."""
    if value is None:
        return None
    if isinstance(value, Tensor) or isinstance(value, list):
        return value[:n]
    if isinstance(value, tuple):
        return tuple(head(v, n) for v in value)
    if dataclasses.is_dataclass(value):
        return select_rows(value, torch.arange(n))
    return value


def gather_rows(value, n: int, device: torch.device | str | None = None):
    """Every rank's per-row ``value`` concatenated in rank order, padding rows dropped (first ``n``)."""
    if not active():
        return value
    parts = all_gather_objects(to_device(value, "cpu"))
    out = head(concat(parts), n)
    return to_device(out, device) if device is not None else out
