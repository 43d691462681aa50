"""The few collectives the loops use, each a no-op (returning its input) in one process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tether.common.runtime import rank, world_size

_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}


def active() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and world_size() > 1


def all_reduce(values: list[float] | float, op: str = "sum"):
    """``values`` (a float or a list of floats) reduced over ranks with ``op`` (sum, max, min)."""
    if not active():
        return values
    single = not isinstance(values, (list, tuple))
    tensor = torch.tensor([values] if single else list(values), dtype=torch.float64, device=_device())
    torch.distributed.all_reduce(tensor, op=getattr(torch.distributed.ReduceOp, _OPS[op]))
    out = tensor.cpu().tolist()
    return out[0] if single else out


def all_gather_objects(obj: Any) -> list:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` in one process."""
    if not active():
        return [obj]
    out: list = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank."""
    if not active():
        return obj
    box = [obj if rank() == src else None]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if active():
        torch.distributed.barrier()


def on_main(fn: Callable[[], Any]) -> Any:
    """``fn()`` on rank 0 alone, its result (or the exception it raised) on every rank: checks
    and decisions that read or write the run directory are made once, and agreed on."""
    if not active():
        return fn()
    result, error = None, None
    if rank() == 0:
        try:
            result = fn()
        except Exception as exc:  # every rank raises it below
            error = exc
    result, error = broadcast_object((result, error))
    if error is not None:
        raise error
    return result


def _device() -> torch.device:
    backend = torch.distributed.get_backend()
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
