"""The data-parallel placement: every role on every rank (torchrun), each rank working on its
share of every batch.

The loop is the one-process loop, run by every rank in step. Behind the same role calls:

- ``rollout.generate`` samples this rank's share of the prompts (its own random stream, from
  (seed, iteration, rank)), inside the actor's ``gathered()`` (FSDP: whole weights, because ranks
  take different numbers of decode steps), and the rollouts of all ranks come back as one;
- ``logprobs``, ``values`` and ``score`` run on this rank's share of the rollout's rows, and the
  results are gathered: every rank then holds the whole batch's log-probs, values and scores,
  so whitening, score normalisation, the KL fed to the controller, explained variance and every
  logged mean are computed over the whole batch, identically on every rank (the same numbers a
  one-process run computes, without a separate all-reduce per statistic);
- ``update`` hands each rank the whole experience: the training engine trains on its slice of
  every micro-batch under DDP or FSDP, and the stats come back summed over ranks.

Which call is which is the role method's own declaration (:mod:`tether.dispatch`: ``@prompts``,
``@rows``, or every rank with the same arguments); this module keeps no table of role methods.

Calls run one after the other (no update threads): collectives from two threads at once could
interleave differently on different ranks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from torch import Tensor

from tether.dispatch import PROMPTS, ROWS, dispatch_of
from tether.distributed.collectives import all_gather_objects
from tether.distributed.shard import gather_rows, head, shard_rows
from tether.placement.local import LocalPlacement
from tether.rollout.base import concat_rollouts
from tether.runtime import rank, rank_seed
from tether.types import to_device


def _device_of(value):
    if isinstance(value, Tensor):
        return value.device
    if isinstance(value, (tuple, list)):
        for v in value:
            found = _device_of(v)
            if found is not None:
                return found
    return None


class DataParallelPlacement:
    """A :class:`LocalPlacement` on each rank, with the batch split over ranks (see the module)."""

    def __init__(self, local: LocalPlacement, pad_id: int, generation_context: Callable[[], Any] | None = None):
        self.local = local
        self.pad_id = pad_id
        self.generation_context = generation_context or contextlib.nullcontext

    def has(self, role: str) -> bool:
        return self.local.has(role)

    def call(self, role: str, method: str, *args, **kwargs) -> Any:
        kind = dispatch_of(self.local.roles[role], method) if role in self.local.roles else None
        if kind == PROMPTS:
            return self._generate(role, method, *args, **kwargs)
        if kind == ROWS:
            rollout, rest = args[0], args[1:]
            share, _ = shard_rows(rollout, len(rollout))
            out = self.local.call(role, method, share, *rest, **kwargs)
            return gather_rows(out, len(rollout), _device_of(out))
        return self.local.call(role, method, *args, **kwargs)

    def submit(self, role: str, method: str, *args, **kwargs):
        return (role, method, args, kwargs)

    def wait(self, handles: list) -> list:
        return [self.call(role, method, *args, **kwargs) for role, method, args, kwargs in handles]

    def parallel(self) -> bool:
        return False

    def close(self) -> None:
        self.local.close()

    def _generate(self, role: str, method: str, prompt_ids: list, prompts: list, params, seed: int | None = None,
                  chunk_size: int | None = None, on_step=None, **extra):
        """``role.method`` (declared ``@prompts``) on this rank's share of the prompts, every rank's
        rollouts joined in rank order."""
        n = len(prompt_ids)
        ids, _ = shard_rows(prompt_ids, n)
        texts, _ = shard_rows(prompts, n)
        if seed is not None and rank() > 0:  # a fixed-seed call (evaluation): each rank its own stream
            seed = rank_seed(seed, 0)
        with self.generation_context():
            part = self.local.call(role, method, ids, texts, params, seed, chunk_size, on_step, **extra)
        device = part.prompt_ids.device
        parts = all_gather_objects(to_device(part, "cpu"))
        whole = concat_rollouts(parts, self.pad_id) if len(parts) > 1 else parts[0]
        return to_device(head(whole, n), device)
