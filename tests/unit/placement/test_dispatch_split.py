"""Both multi-worker placements split a role method by its own declaration: a new method declared
``@rows`` is split over the workers and gathered back in order, an undeclared one goes whole to
every worker, with no placement code naming either."""

from __future__ import annotations

import torch

import tether.distributed.shard as shard
import tether.placement.data_parallel as data_parallel
from tether.common.dispatch import declarations, rows
from tether.placement.data_parallel import DataParallelPlacement
from tether.placement.local import LocalPlacement
from tether.placement.ray_placement import Group, RayPlacement


class Lengths:
    """A role no placement knows: ``measure`` reads rows, ``count`` does not."""

    def __init__(self):
        self.seen = []

    @rows
    def measure(self, batch, scale=1):
        self.seen.append(("measure", list(batch)))
        return torch.tensor([len(x) * scale for x in batch])

    def count(self, batch):
        self.seen.append(("count", list(batch)))
        return len(batch)


BATCH = ["a", "bb", "ccc", "dddd", "eeeee"]


def test_data_parallel_splits_a_declared_method_by_rows(monkeypatch):
    # Rank 0 of 2: the first ceil(5/2) = 3 rows; the gather (a collective) is recorded.
    monkeypatch.setattr(shard, "world_size", lambda: 2)
    monkeypatch.setattr(shard, "rank", lambda: 0)
    gathered = []
    monkeypatch.setattr(data_parallel, "gather_rows", lambda out, n, device: gathered.append((out.tolist(), n)) or out)
    role = Lengths()
    placement = DataParallelPlacement(LocalPlacement({"lengths": role}), pad_id=0)
    out = placement.call("lengths", "measure", BATCH, scale=10)
    assert out.tolist() == [10, 20, 30] and gathered == [([10, 20, 30], 5)]
    assert placement.call("lengths", "count", BATCH) == 5
    assert role.seen == [("measure", BATCH[:3]), ("count", BATCH)]


class _Remote:
    """A worker's ``call`` as Ray would run it, here at once in this process."""

    def __init__(self, roles):
        self.roles = roles

    def remote(self, role, method, seed, kwargs, *args):
        return getattr(self.roles[role], method)(*args, **kwargs)


class _Worker:
    def __init__(self, roles):
        self.call = _Remote(roles)


class _Ray:
    def put(self, value):
        return value


def ray_placement(workers: list[dict]) -> RayPlacement:
    """A Ray placement over in-process workers: its routing and dispatch as set up from the
    workers' reports (``RoleWorker.build`` returns ``declarations`` of its roles)."""
    placement = RayPlacement.__new__(RayPlacement)
    group = Group(("lengths",), "lengths", workers=[_Worker(w) for w in workers])
    placement.ray, placement.route, placement.groups, placement._puts = _Ray(), {"lengths": group}, [group], {}
    placement.dispatch = declarations(workers[0])
    placement._get = lambda group, what, refs: refs
    return placement


def test_ray_splits_a_declared_method_by_rows_over_the_group():
    a, b = Lengths(), Lengths()
    placement = ray_placement([{"lengths": a}, {"lengths": b}])
    assert placement.call("lengths", "measure", BATCH, scale=10).tolist() == [10, 20, 30, 40, 50]
    # 5 rows padded to 6 by repeating the last (every worker the same count); the pad is dropped.
    assert a.seen == [("measure", BATCH[:3])] and b.seen == [("measure", BATCH[3:] + BATCH[-1:])]
    # Not declared: every worker gets the whole batch, the first worker answers.
    assert placement.call("lengths", "count", BATCH) == 5
    assert a.seen[-1] == b.seen[-1] == ("count", BATCH)
