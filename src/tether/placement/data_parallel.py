"""The data-parallel placement: every role on every rank (torchrun), each rank working on its
share of every batch.

The loop is the one-process loop, run by every rank in step. Behind the same role calls:

- ``rollout.generate`` samples this rank's share of the prompts (its own random stream, from
  (seed, iteration, rank)), inside the actor's ``gathered()`` (FSDP: whole weights, because ranks
  take different numbers of decode steps), and the rollouts of all ranks come back as one; an
  episode engine gets the prompt rows of its share too (``rows=``, a prompt-aligned argument) and
  runs those episodes, their action masks, per-turn rewards and records joined with the rest;
- ``logprobs``, ``values`` and ``score`` run on this rank's share of the rollout's rows, and the
  results are gathered: every rank then holds the whole batch's log-probs, values and scores,
  so whitening, score normalisation, the KL fed to the controller, explained variance and every
  logged mean are computed over the whole batch, identically on every rank (the same numbers a
  one-process run computes, without a separate all-reduce per statistic);
- ``update`` hands each rank the whole experience: the training engine trains on its slice of
  every micro-batch under DDP or FSDP, and the stats come back summed over ranks;
- a sampling worker's ``request`` (asynchronous RL, ``@asks``) sends each rank's worker its
  contiguous share of the prompts, with its own random stream, and its ``receive`` (``@answers``)
  joins every rank's share back in rank order.

Which call is which is the role method's own declaration (:mod:`tether.common.dispatch`: ``@prompts``,
``@rows``, or every rank with the same arguments); this module keeps no table of role methods.

Calls run one after the other (no update threads): collectives from two threads at once could
interleave differently on different ranks.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from torch import Tensor

from tether.common.dispatch import ANSWERS, ASKS, PROMPTS, ROWS, dispatch_of, split_prompts
from tether.distributed.collectives import all_gather_objects
from tether.distributed.shard import gather_rows, head, shard_rows
from tether.placement.local import LocalPlacement
from tether.rollout.base import concat_rollouts
from tether.common.runtime import rank, rank_seed, world_size
from tether.types import Rollout, to_device


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
        if kind == ASKS:
            return self._ask(role, method, *args, **kwargs)
        if kind == ANSWERS:
            part = self.local.call(role, method, *args, **kwargs)
            device = _device_of(getattr(part, "rollout", part).prompt_ids)
            return to_device(join_answers(all_gather_objects(to_device(part, "cpu")), self.pad_id), device)
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

    def _ask(self, role: str, method: str, prompt_ids: list, prompts: list, params, seed: int | None = None,
             *rest, **kwargs) -> None:
        """``role.method`` (declared ``@asks``) with this rank's contiguous share of the prompts: a
        sampling worker has no collectives inside, so shares may differ by a row, and rank order
        joins them back in order. Each rank samples from its own stream."""
        n, r, w = len(prompt_ids), rank(), world_size()
        if n < w:
            raise ValueError(f"{n} prompts cannot be shared by {w} ranks' sampling workers")
        lo, hi = r * n // w, (r + 1) * n // w
        if seed is not None and r > 0:
            seed = rank_seed(seed, 0)
        ids, texts, kwargs = split_prompts(lambda v: v[lo:hi], prompt_ids, prompts, kwargs)
        self.local.call(role, method, ids, texts, params, seed, *rest, **kwargs)

    def _generate(self, role: str, method: str, prompt_ids: list, prompts: list, params, seed: int | None = None,
                  chunk_size: int | None = None, on_step=None, **extra):
        """``role.method`` (declared ``@prompts``) on this rank's share of the prompts (and of the
        prompt-aligned keyword arguments: :func:`tether.common.dispatch.split_prompts`), every rank's
        rollouts joined in rank order."""
        n = len(prompt_ids)
        ids, texts, extra = split_prompts(lambda v: shard_rows(v, n)[0], prompt_ids, prompts, extra)
        if seed is not None and rank() > 0:  # a fixed-seed call (evaluation): each rank its own stream
            seed = rank_seed(seed, 0)
        if on_step is not None:
            extra["on_step"] = on_step
        with self.generation_context():
            part = self.local.call(role, method, ids, texts, params, seed=seed, chunk_size=chunk_size, **extra)
        device = part.prompt_ids.device
        parts = all_gather_objects(to_device(part, "cpu"))
        whole = concat_rollouts(parts, self.pad_id) if len(parts) > 1 else parts[0]
        return to_device(head(whole, n), device)


def join_answers(parts: list, pad_id: int):
    """Every rank's answer to an ``@asks`` call, in rank order, as one: a rollout, or a record
    (dataclass) holding one. Rollouts are concatenated; seconds (floats) are the slowest rank's;
    every other field must be the same on every rank (a weights version)."""
    first = parts[0]
    if isinstance(first, Rollout):
        return concat_rollouts(parts, pad_id)
    joined = {}
    for f in dataclasses.fields(first):
        values = [getattr(p, f.name) for p in parts]
        if isinstance(values[0], Rollout):
            joined[f.name] = concat_rollouts(values, pad_id)
        elif isinstance(values[0], float):
            joined[f.name] = max(values)
        elif any(v != values[0] for v in values[1:]):
            raise RuntimeError(f"the ranks' sampling workers answered different {f.name}: {values}")
        else:
            joined[f.name] = values[0]
    return dataclasses.replace(first, **joined)
