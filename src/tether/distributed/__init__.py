"""Data parallelism on torch.distributed: the process group (:mod:`.process`), the collectives
the loops need (:mod:`.collectives`), how a batch is split over ranks (:mod:`.shard`) and how a
trained model is wrapped for a strategy, DDP or FSDP2 (:mod:`.wrap`).

Launched with ``torchrun``; without it every helper is a no-op and the run is one process.
See docs/distributed.md.
"""

from tether.distributed.collectives import (
    all_gather_objects,
    all_reduce,
    barrier,
    broadcast_object,
)
from tether.distributed.process import DistributedSession, init_distributed, launched_by_torchrun
from tether.distributed.shard import gather_rows, rank_slice, shard_rows

__all__ = [
    "DistributedSession",
    "all_gather_objects",
    "all_reduce",
    "barrier",
    "broadcast_object",
    "gather_rows",
    "init_distributed",
    "launched_by_torchrun",
    "rank_slice",
    "shard_rows",
]
