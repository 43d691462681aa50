"""The sampling worker: a process of its own over its own copy of the policy, synced by version."""

from __future__ import annotations

import copy

import pytest
import torch

from tether.bench.setup import SIZES, build_setup
from tether.common.errors import TrainingError
from tether.rollout import LeanGenerationEngine, SamplingParams
from tether.rollout.worker import RolloutWorker, WorkerSpec, _load_weights

PARAMS = SamplingParams(max_new_tokens=6, temperature=0.9)


@pytest.fixture(scope="module")
def setup():
    return build_setup(SIZES["micro"], 4, seed=5)


@pytest.fixture(scope="module")
def worker(setup):
    model = setup.models["policy"]
    spec = WorkerSpec("lean", model.config, setup.tokenizer, capture=True, threads=1)
    worker = RolloutWorker(spec, lambda: model.state_dict().items())
    worker.push_weights(0)
    yield worker
    worker.close()


def lean(model, setup, seed):
    engine = LeanGenerationEngine(model, setup.tokenizer, capture=True)
    return engine.generate(setup.prompts.ids[:4], setup.prompts.texts[:4], PARAMS, seed=seed)


def test_the_worker_samples_what_the_actor_would_with_the_same_seed(worker, setup):
    worker.request(setup.prompts.ids[:4], setup.prompts.texts[:4], PARAMS, seed=7, key=0)
    got = worker.receive(0)
    want = lean(setup.models["policy"], setup, seed=7)
    assert got.key == 0 and got.version == 0
    assert got.generate_s > 0 and got.wait_s >= 0
    assert torch.equal(got.rollout.response_ids, want.response_ids)
    torch.testing.assert_close(got.rollout.sampled_logprobs, want.sampled_logprobs, rtol=1e-5, atol=1e-5)


def test_pushed_weights_sample_the_next_request_with_their_version(worker, setup):
    """Weights pushed between two requests: the second is sampled by them, tagged with their version."""
    model = setup.models["policy"]
    changed = copy.deepcopy(model)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(0.05 * torch.randn_like(p))
    worker.request(setup.prompts.ids[:4], setup.prompts.texts[:4], PARAMS, seed=7, key=1)
    source = worker.weights_source
    worker.weights_source = lambda: changed.state_dict().items()
    try:
        worker.push_weights(3)
    finally:
        worker.weights_source = source
    worker.request(setup.prompts.ids[:4], setup.prompts.texts[:4], PARAMS, seed=7, key=2)
    before, after = worker.receive(1), worker.receive(2)
    assert (before.version, after.version) == (0, 3)
    want = lean(changed, setup, seed=7)
    torch.testing.assert_close(after.rollout.sampled_logprobs, want.sampled_logprobs, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before.rollout.sampled_logprobs, after.rollout.sampled_logprobs)
    worker.push_weights(0)  # back to the module's weights for the other tests


def test_weights_must_cover_the_model_and_name_only_its_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    named = list(model.state_dict().items())
    _load_weights(model, named)
    with pytest.raises(KeyError, match="unset"):
        _load_weights(model, named[:2])
    with pytest.raises(KeyError, match="has not"):
        _load_weights(model, [*named, ("extra.weight", torch.zeros(1))])


def test_a_failing_worker_is_reported_with_its_error(setup):
    """Weights the worker's model has no place for: the child's error reaches the trainer's next
    receive, and the process is gone."""
    model = setup.models["policy"]
    spec = WorkerSpec("lean", model.config, setup.tokenizer, threads=1)
    worker = RolloutWorker(spec, lambda: [("not.a.weight", torch.zeros(1))])
    try:
        worker.push_weights(0)
        worker.request(setup.prompts.ids[:1], setup.prompts.texts[:1], PARAMS, seed=0, key=0)
        with pytest.raises(TrainingError, match="not.a.weight"):
            worker.receive(0)
    finally:
        worker.close()


class RecordingEngine:
    """An engine with its own weights: records loads and samples in order (from the sampler's thread)."""

    def __init__(self):
        self.calls, self.weights = [], None

    def load_weights(self, named):
        self.weights = dict(named)
        self.calls.append(("load", float(self.weights["w"])))

    def generate(self, prompt_ids, prompts, params, seed=None):
        self.calls.append(("generate", prompts[0], float(self.weights["w"])))
        return f"rollout of {prompts[0]} by w={float(self.weights['w'])}"


def test_an_engine_with_its_own_weights_loads_and_samples_in_order_in_one_thread():
    from tether.rollout.worker import EngineThread

    engine, w = RecordingEngine(), torch.zeros(())
    sampler = EngineThread(engine, lambda: [("w", w)])
    try:
        sampler.push_weights(0)
        sampler.request([[1]], ["a"], PARAMS, seed=0, key=0)
        w.fill_(1.0)  # the actor trains: the push snapshots the weights of this moment
        sampler.push_weights(1)
        w.fill_(2.0)
        sampler.request([[1]], ["b"], PARAMS, seed=0, key=1)
        first, second = sampler.receive(0), sampler.receive(1)
        assert (first.version, first.rollout) == (0, "rollout of a by w=0.0")
        assert (second.version, second.rollout) == (1, "rollout of b by w=1.0")
        sampler.drain()
        assert engine.calls == [("load", 0.0), ("generate", "a", 0.0), ("load", 1.0), ("generate", "b", 1.0)]
    finally:
        sampler.close()
