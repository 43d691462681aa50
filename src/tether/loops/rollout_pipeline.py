"""Bounded-staleness rollouts: iteration i trains on a rollout that a worker with its own copy of
the weights sampled while earlier iterations trained (``rollout.max_staleness`` = k >= 1).

Versions count optimiser iterations: the actor holds version i when iteration i starts. The
worker is given version i+1 as soon as iteration i's update ends (:meth:`RolloutPipeline.push`),
and iteration i asks for the rollout of iteration i+k (:meth:`RolloutPipeline.take`). The
worker serves weights and requests in order, so that rollout is sampled by version i (or by the
run's first version, for the first k iterations): no rollout trains more than k versions after
the weights that sampled it. With k = 1 the next rollout is sampled while this one trains.

Everything a rollout depends on is fixed by its iteration: its prompts, its seed, and the
version that samples it. :meth:`state_dict` keeps the rollouts in flight (sampled, not yet
trained on) with a checkpoint, so a resumed run trains on exactly the rollouts the uninterrupted
run would have. An episode lives inside one rollout: it is sampled whole by that rollout's version,
so its staleness is the rollout's (episodes in flight are kept with their rollouts).

The worker is anything with ``request(prompt_ids, prompts, params, seed, key)``,
``receive(key) -> Sampled`` and ``push_weights(version)``
(:class:`tether.rollout.worker.RolloutWorker` behind the placement's "sampler" role).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tether.rollout.worker import Sampled, episode_rows
from tether.types import Rollout


def staleness(iteration: int, version: int) -> int:
    """How many updates the weights that sampled a rollout are behind those that train on it."""
    return iteration - version


def sampled_stats(iteration: int, sampled: Sampled, waited: float) -> dict:
    """The metrics of a rollout sampled ahead and trained on at ``iteration``, ``waited`` seconds
    after the trainer asked for it (one version per rollout: the staleness mean and max agree)."""
    lag = float(staleness(iteration, sampled.version))
    return {"rollout/staleness_mean": lag, "rollout/staleness_max": lag, "timing/rollout_wait": waited,
            "timing/engine_wait": sampled.wait_s, "timing/engine_generate": sampled.generate_s}


class RolloutPipeline:
    """Rollouts sampled ``max_staleness`` iterations ahead by ``worker``.

    ``prompts_of(i)`` -> (prompt ids, texts) of iteration i; ``seed_of(i)``: its sampling seed;
    ``params``: the sampling parameters; ``rows_of(i)``: the prompt rows of iteration i's episodes
    (a run with an environment; None: single-turn); ``start``: the first iteration this process
    runs (the worker already holds that version).
    """

    def __init__(self, worker, max_staleness: int, prompts_of: Callable[[int], tuple], seed_of: Callable[[int], int],
                 params, start: int = 0, rows_of: Callable[[int], list[dict]] | None = None):
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 for a pipeline, got {max_staleness}")
        self.worker, self.k = worker, max_staleness
        self.prompts_of, self.seed_of, self.params, self.rows_of = prompts_of, seed_of, params, rows_of
        self.next = start  # the first iteration whose rollout has not been requested
        self.held: dict[int, Sampled] = {}  # sampled and received, not yet trained on (resume)

    def take(self, iteration: int) -> Sampled:
        """Iteration ``iteration``'s rollout, after asking for those up to ``iteration + k``."""
        while self.next <= iteration + self.k:
            rows = episode_rows(None if self.rows_of is None else self.rows_of(self.next))
            self.worker.request(*self.prompts_of(self.next), self.params, self.seed_of(self.next), key=self.next, **rows)
            self.next += 1
        sampled = self.held.pop(iteration, None) or self.worker.receive(iteration)
        lag = staleness(iteration, sampled.version)
        if not 0 <= lag <= self.k:  # the loop's promise: a broken one is a bug, never a setting
            raise RuntimeError(f"iteration {iteration} got a rollout of weights version {sampled.version}: "
                               f"staleness {lag} outside [0, {self.k}]")
        return sampled

    def push(self, version: int) -> None:
        """The actor's weights after ``version`` updates go to the worker (ahead of later requests)."""
        self.worker.push_weights(version)

    def drain(self) -> None:
        """Wait until the worker has run everything queued (a worker that drives the run's own
        engine then leaves it free, holding the last weights pushed)."""
        self.worker.drain()

    def in_flight(self, iteration: int) -> list[int]:
        """The iterations at or after ``iteration`` whose rollouts were requested."""
        return list(range(iteration, self.next))

    # -- resume ---------------------------------------------------------------------------------
    def state_dict(self, iteration: int) -> dict:
        """The rollouts requested for iterations ``iteration`` and later, waited for and kept (a
        checkpoint taken before iteration ``iteration`` holds them)."""
        for i in self.in_flight(iteration):
            if i not in self.held:
                self.held[i] = self.worker.receive(i)
        return {"next": self.next, "rollouts": [_plain(self.held[i]) for i in self.in_flight(iteration)]}

    def load_state_dict(self, state: dict) -> None:
        self.next = state["next"]
        self.held = {row["key"]: Sampled(row["key"], Rollout(**row["rollout"]), row["version"], 0.0, 0.0)
                     for row in state["rollouts"]}


def _plain(sampled: Sampled) -> dict:
    """A sampled rollout as plain containers (what a checkpoint's trainer state holds)."""
    ro = sampled.rollout
    return {"key": sampled.key, "version": sampled.version,
            "rollout": {f.name: getattr(ro, f.name) for f in dataclasses.fields(ro)}}
