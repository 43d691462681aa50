"""The trained model of a supervised stage as a role: a batch of row indices becomes micro-batches
weighted by their rows' shares, through the role's training engine."""

from __future__ import annotations

import pytest

from tether.placement.ray_placement import primary_role
from tether.roles.supervised import StageRoles, SupervisedModel


class RecordingEngine:
    def __init__(self):
        self.calls = []

    def train_step(self, chunks, loss, weight, name, where):
        self.calls.append((chunks, [weight(c) for c in chunks], name, where))
        return {"stats": {}, "grad_norm": None, "skipped_steps": 0, "timing": {}}


def test_update_cuts_the_rows_into_micro_batches_weighted_by_their_rows():
    engine = RecordingEngine()
    role = SupervisedModel(engine, loss=None, weight_of=lambda row: float(row), name="sft loss")
    role.update([3, 1, 4, 1, 5], 2, 7)
    # 5 rows in micro-batches of 2: [3, 1], [4, 1], [5]; weights 3+1, 4+1, 5.
    assert engine.calls == [([[3, 1], [4, 1], [5]], [4.0, 5.0, 5.0], "sft loss", 7)]


def test_update_takes_the_micro_batches_it_is_given():
    engine = RecordingEngine()
    role = SupervisedModel(engine, loss=None, weight_of=lambda row: float(row), name="sft loss")
    role.update([3, 1, 4, 5], [[4], [1, 3], [5]], 2)  # e.g. binned by a token budget
    assert engine.calls == [([[4], [1, 3], [5]], [4.0, 4.0, 5.0], "sft loss", 2)]


def test_before_step_sees_the_whole_batch_before_its_micro_batches():
    engine, seen = RecordingEngine(), []
    role = SupervisedModel(engine, loss=None, before_step=lambda rows: seen.append((list(rows), len(engine.calls))))
    role.update([3, 1, 4], 1, 1)
    assert seen == [([3, 1, 4], 0)] and len(engine.calls) == 1  # called once, before the engine's step


def test_micro_batches_that_are_not_the_batch_are_refused():
    role = SupervisedModel(RecordingEngine(), loss=None)
    with pytest.raises(ValueError, match="do not hold the batch's rows"):
        role.update([3, 1, 4], [[3], [1]], 1)


def test_evaluation_is_optional():
    role = SupervisedModel(RecordingEngine(), loss=None)
    assert role.evaluate() == {}
    role = SupervisedModel(RecordingEngine(), loss=None, evaluate=lambda: {"eval/loss": 1.5})
    assert role.evaluate() == {"eval/loss": 1.5}


def test_a_stage_role_is_its_own_ray_group():
    roles = StageRoles({"policy": object()})
    assert list(roles.placed()) == ["policy"] and roles.contexts == {}
    assert primary_role(("policy",), []) == "policy"  # a role outside the RL roles' order
