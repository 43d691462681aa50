"""The bounded-staleness pipeline's control, against a worker that serves requests in order with
the weights last pushed (what :class:`tether.rollout.worker.RolloutWorker` does): which version
samples each iteration's rollout, for k = 1 and 2, and a resume from its state."""

from __future__ import annotations

import pytest
import torch

from tether.loops.rollout_pipeline import RolloutPipeline, staleness
from tether.rollout.worker import Sampled
from tether.types import Rollout


def stub_rollout(key: int) -> Rollout:
    ids = torch.full((1, 2), key)
    return Rollout(ids, torch.ones_like(ids), ids, torch.ones_like(ids), torch.tensor([True]), [f"p{key}"], [f"r{key}"])


class InOrderWorker:
    """Requests and weight pushes applied in the order they are posted; the log records them."""

    def __init__(self, version: int = 0):
        self.version, self.log, self.done = version, [], {}

    def push_weights(self, version: int) -> None:
        self.version = version
        self.log.append(("weights", version))

    def request(self, prompt_ids, prompts, params, seed, key) -> None:
        self.log.append(("generate", key, seed))
        self.done[key] = Sampled(key, stub_rollout(key), self.version, 0.0, 0.0)

    def receive(self, key) -> Sampled:
        return self.done.pop(key)


def pipeline(worker, k, start=0):
    return RolloutPipeline(worker, k, lambda i: ([[i]], [f"p{i}"]), lambda i: 1000 + i, params=None, start=start)


def run(pipe, iterations, start=0) -> list[int]:
    """The trainer's side: take iteration i's rollout, train (nothing), push version i + 1."""
    versions = []
    for i in range(start, start + iterations):
        got = pipe.take(i)
        assert got.key == i and got.rollout.prompts == [f"p{i}"]
        versions.append(got.version)
        pipe.push(i + 1)
    return versions


def test_staleness_is_the_updates_between_sampling_and_training():
    assert staleness(5, 3) == 2
    assert staleness(4, 4) == 0


@pytest.mark.parametrize("k, want", [(1, [0, 0, 1, 2, 3, 4]), (2, [0, 0, 0, 1, 2, 3]), (3, [0, 0, 0, 0, 1, 2])])
def test_each_rollout_is_sampled_by_the_weights_k_updates_back(k, want):
    """Iteration i's rollout is asked for when iteration i - k starts, after version i - k was pushed."""
    versions = run(pipeline(InOrderWorker(), k), 6)
    assert versions == want
    assert [staleness(i, v) for i, v in enumerate(versions)] == [min(i, k) for i in range(6)]


def test_the_next_rollout_is_requested_before_this_one_trains():
    worker = InOrderWorker()
    pipe = pipeline(worker, 1)
    pipe.take(0)
    assert worker.log == [("generate", 0, 1000), ("generate", 1, 1001)]
    pipe.push(1)
    pipe.take(1)
    assert worker.log[2:] == [("weights", 1), ("generate", 2, 1002)]


def test_a_resumed_pipeline_serves_what_the_uninterrupted_one_would():
    """State after 3 iterations; a fresh worker holding version 3 and the loaded state carry on with
    the same versions, seeds and rollouts as the pipeline that never stopped."""
    k = 2
    whole = InOrderWorker()
    whole_pipe = pipeline(whole, k)
    want = run(whole_pipe, 7)

    first = pipeline(InOrderWorker(), k)
    got = run(first, 3)
    state = first.state_dict(3)
    assert [row["key"] for row in state["rollouts"]] == [3, 4]  # sampled ahead, not yet trained on
    assert state["rollouts"][0]["rollout"]["prompts"] == ["p3"]
    worker = InOrderWorker(version=3)  # the resumed worker starts from the checkpoint's weights
    resumed = pipeline(worker, k, start=3)
    resumed.load_state_dict(state)
    got += run(resumed, 4, start=3)
    assert got == want
    assert [e for e in worker.log if e[0] == "generate"] == [("generate", i, 1000 + i) for i in (5, 6, 7, 8)]


def test_a_rollout_outside_the_bound_is_a_bug_not_a_result():
    class Stale(InOrderWorker):
        def receive(self, key):
            got = super().receive(key)
            return Sampled(got.key, got.rollout, got.version - 5, 0.0, 0.0)

    with pytest.raises(RuntimeError, match="staleness"):
        run(pipeline(Stale(), 1), 1)


def test_a_pipeline_needs_staleness_of_at_least_one():
    with pytest.raises(ValueError, match="max_staleness"):
        pipeline(InOrderWorker(), 0)


def test_a_rollouts_metrics_name_its_staleness_and_the_waits():
    from tether.loops.rollout_pipeline import sampled_stats

    got = sampled_stats(7, Sampled(7, stub_rollout(7), version=6, wait_s=0.25, generate_s=1.5), waited=0.1)
    assert got == {"rollout/staleness_mean": 1.0, "rollout/staleness_max": 1.0, "timing/rollout_wait": 0.1,
                   "timing/engine_wait": 0.25, "timing/engine_generate": 1.5}
