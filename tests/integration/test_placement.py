"""The loop owns control, roles own compute (docs/architecture.md): a PPO run through a placement that
records every role call, and guards that fail any role call made around it."""

from __future__ import annotations

import threading

import pytest
import torch

from tether.config import RLConfig, load_config
from tether.placement.local import LocalPlacement

from test_resume import ppo_overrides


class Guarded:
    """A role that refuses any call not made through its placement."""

    def __init__(self, name: str, role, placement: "RecordingPlacement"):
        self._name, self._role, self._placement = name, role, placement

    def __getattr__(self, attr):
        value = getattr(self._role, attr)
        if callable(value) and not attr.startswith("_"):
            def guarded(*args, **kwargs):
                assert getattr(self._placement.inside, "active", False), \
                    f"{self._name}.{attr} was called around the placement"
                return value(*args, **kwargs)
            return guarded
        return value


class RecordingPlacement(LocalPlacement):
    """The in-process placement, recording (role, method) of every call and submit."""

    def __init__(self, roles: dict, parallel: bool = False):
        self.inside = threading.local()
        super().__init__({name: Guarded(name, r, self) for name, r in roles.items()}, parallel)
        self.calls: list[tuple[str, str]] = []
        self.submitted: list[tuple[str, str]] = []

    def call(self, role, method, *args, **kwargs):
        self.calls.append((role, method))
        previous = getattr(self.inside, "active", False)
        self.inside.active = True
        try:
            return super().call(role, method, *args, **kwargs)
        finally:
            self.inside.active = previous

    def submit(self, role, method, *args, **kwargs):
        self.submitted.append((role, method))
        return super().submit(role, method, *args, **kwargs)


@pytest.fixture
def recording(monkeypatch):
    """run_rl with its roles behind a RecordingPlacement; the placements made are collected."""
    import tether.loops.rl_run as rl_run
    from tether.roles.build import build_roles

    made = []

    def make_placement(cfg, checkpoint=None):
        roles = build_roles(cfg, checkpoint)
        placement = RecordingPlacement(roles.placed())
        made.append(placement)
        return placement, roles.tokenizer, roles.contexts

    monkeypatch.setattr(rl_run, "make_placement", make_placement)
    return made


def test_every_role_call_of_a_run_goes_through_the_placement(tiny_task, tmp_path, recording):
    from tether.loops.rl_run import run_rl

    task = tiny_task["dir"]
    cfg = load_config(RLConfig, None, ppo_overrides(task, tmp_path / "run") + [
        "rl.iterations=2", f"eval.prompts={task / 'eval_prompts.jsonl'}", "eval.every=1",
        "eval.max_prompts=4", "eval.judge=tether.tasks.arith.judge:gold_score"])
    result = run_rl(cfg)
    placement = recording[0]
    calls = set(placement.calls)
    # The iteration: sample, score, values, reward, updates, the learning rate, weight sync check.
    for expected in [("rollout", "generate"), ("actor", "logprobs"), ("reference", "logprobs"),
                     ("critic", "values"), ("reward", "score"), ("critic", "update"), ("actor", "update"),
                     ("actor", "last_lr"), ("critic", "trains_alone"),
                     # checkpoints, resume state and the final save
                     ("actor", "save_pretrained"), ("critic", "save_pretrained"), ("actor", "state_dict"),
                     ("critic", "state_dict"), ("actor", "nonfinite")]:
        assert expected in calls, expected
    assert set(placement.submitted) == {("critic", "update"), ("actor", "update")}
    assert result["history"] and "eval/gold_score" in result["history"][-1]
    # The evaluator sampled and scored through the placement too: more generate calls than iterations.
    assert placement.calls.count(("rollout", "generate")) >= 2 * cfg.rl.iterations


def test_a_role_called_around_the_placement_is_caught():
    role = type("R", (), {"ping": lambda self: "pong"})()
    placement = RecordingPlacement({"r": role})
    assert placement.call("r", "ping") == "pong"
    with pytest.raises(AssertionError, match="r.ping was called around the placement"):
        placement.roles["r"].ping()


def test_submitted_calls_run_side_by_side_and_in_order():
    import time

    class Slow:
        def wait(self, x):
            time.sleep(0.2)
            return x

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        placement = LocalPlacement({"a": Slow(), "b": Slow()}, parallel=True)
        assert placement.parallel()
        t0 = time.perf_counter()
        out = placement.wait([placement.submit("a", "wait", 1), placement.submit("b", "wait", 2)])
        assert out == [1, 2] and time.perf_counter() - t0 < 0.35
        placement.close()
    finally:
        torch.set_num_threads(before)
    with pytest.raises(KeyError, match="no role 'c'"):
        placement.submit("c", "wait", 1)
