"""The loops' collectives in one process (no process group): each returns its input or does
nothing, and ``on_main`` runs its function here, result and exception alike."""

from __future__ import annotations

import pytest
import torch

from tether.distributed import collectives
from tether.distributed.collectives import active, all_gather_objects, all_reduce, barrier, broadcast_object, on_main
from tether.engines.training import reduce_stats


@pytest.fixture(autouse=True)
def one_process():
    assert not torch.distributed.is_initialized()


def test_not_active_without_a_process_group():
    assert active() is False


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_all_reduce_returns_its_input(op):
    assert all_reduce(2.5, op) == 2.5
    values = [1.0, -3.0, 7.25]
    assert all_reduce(values, op) is values


def test_all_gather_objects_is_a_list_of_one():
    obj = {"rank": 0, "rows": [1, 2]}
    out = all_gather_objects(obj)
    assert out == [obj] and out[0] is obj
    assert all_gather_objects(None) == [None]


def test_broadcast_object_returns_its_input():
    obj = ("a", 3)
    assert broadcast_object(obj) is obj
    assert broadcast_object(obj, src=1) is obj
    assert broadcast_object(None) is None


def test_barrier_is_a_no_op():
    assert barrier() is None


def test_on_main_runs_fn_once_and_returns_its_result():
    calls = []

    def fn():
        calls.append(1)
        return "picked"

    assert on_main(fn) == "picked"
    assert calls == [1]


def test_on_main_reraises_fns_exception():
    class Refused(Exception):
        pass

    def fn():
        raise Refused("run.out holds another run")

    with pytest.raises(Refused, match="run.out holds another run"):
        on_main(fn)


def test_reduce_stats_is_the_identity_in_one_process():
    stats = {"loss": 0.75, "check/ratio": 1.5, "kl": -0.25}
    assert reduce_stats(stats) == {"check/ratio": 1.5, "kl": -0.25, "loss": 0.75}
    assert reduce_stats({}) == {}


def test_collectives_stay_off_when_a_group_is_not_running(monkeypatch):
    # world_size() > 1 alone (e.g. a patched helper) is not enough: no group, no collective.
    monkeypatch.setattr(collectives, "world_size", lambda: 2)
    assert active() is False
    assert all_reduce(1.0) == 1.0 and all_gather_objects("x") == ["x"]
