"""A reward callable's failures, each one paragraph naming it (roles/callable_scores.py): it
raises, returns no list of B numbers, or returns NaN; nothing is broadcast and no traceback of
tether's is shown."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tether.common.errors import ModelError, TetherError, TrainingError
from tether.roles import CallableReward
from tether.types import Rollout

NAME = "my_rewards:score"


def rollout(responses: list[str]) -> Rollout:
    n = len(responses)
    ids = torch.ones(n, 2, dtype=torch.long)
    return Rollout(ids, ids, ids, ids, torch.ones(n, dtype=torch.bool), ["p"] * n, responses)


def scored(answer, n: int = 3):
    return CallableReward(lambda prompts, responses: answer, NAME).score(rollout([f"r{i}" for i in range(n)]))


def one_paragraph(err) -> str:
    text = str(err)
    assert isinstance(err, TetherError) and "\n" not in text and NAME in text
    return text


def test_a_raising_callable_names_itself_the_exception_and_its_message():
    def broken(prompts, responses):
        return {}["score"]

    with pytest.raises(TrainingError) as info:
        CallableReward(broken, NAME).score(rollout(["a", "b"]))
    text = one_paragraph(info.value)
    assert "raised KeyError: 'score'" in text and "2 responses" in text
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained traceback


@pytest.mark.parametrize("answer, needle", [
    (None, "returned None"),
    ("0.5 0.5 0.5", "returned a str"),
    (0.5, "returned a single float, 0.5"),  # torch would broadcast it to every response
    (torch.tensor(0.5), "returned a single Tensor"),
    (np.float64(0.5), "returned a single float64"),
    ([1.0, 2.0], "returned 2 scores for 3 responses"),
    (torch.ones(3, 1), "Tensor of shape (3, 1)"),
    (["1.0", 2.0, None], "2 value(s) that are not numbers (row 0: '1.0', row 2: None)"),
])
def test_what_is_not_a_list_of_b_floats_is_refused_naming_what_came(answer, needle):
    with pytest.raises(ModelError) as info:
        scored(answer)
    text = one_paragraph(info.value)
    assert needle in text, text
    assert "expected a list of 3 floats" in text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_score_is_refused_naming_its_row(bad):
    with pytest.raises(ModelError) as info:
        scored([0.0, bad, 1.0])
    text = one_paragraph(info.value)
    assert "1 of 3 responses" in text and "row 1 (" in text and "response 'r1'" in text


@pytest.mark.parametrize("answer", [[1, 2, 3], (0.5, True, 2.0), np.array([1.0, 2.0, 3.0]), torch.tensor([1, 2, 3]),
                                    [np.float32(1.0), torch.tensor(2.0), 3]])
def test_numbers_in_any_sequence_pass(answer):
    out = scored(answer)
    assert out.dtype == torch.float32 and out.shape == (3,)
