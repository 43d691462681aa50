"""Process supervision's advantages (DeepSeekMath sec. 4.1.3) and step ends, hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.group import group_advantages
from tether.algos.process import process_advantages, step_ends


def test_process_advantages_hand_worked():
    # One group of two: row 0 has steps ending at t=1 (reward 1) and t=3 (0); row 1 one step
    # ending at t=2 (reward 1), then padding.
    rewards = torch.tensor([[0.0, 1.0, 9.0, 0.0], [0.0, 0.0, 1.0, 7.0]])  # 9 and 7 sit off the step ends
    ends = torch.tensor([[False, True, False, True], [False, False, True, False]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    # R = {1, 0, 1}: mean 2/3, centred 1/3, -2/3, 1/3, sample std sqrt((1/9 + 4/9 + 1/9) / 2) = 1/sqrt(3)
    hi, lo = (1 / 3) * math.sqrt(3), (-2 / 3) * math.sqrt(3)
    out = process_advantages(rewards, ends, mask, group_size=2, eps=0.0)
    expected = torch.tensor([[hi + lo, hi + lo, lo, lo], [hi, hi, hi, 0.0]])
    assert torch.allclose(out, expected, atol=1e-6)
    centred = process_advantages(rewards, ends, mask, group_size=2, scale_by_std=False)
    assert torch.allclose(centred, torch.tensor([[-1 / 3, -1 / 3, -2 / 3, -2 / 3], [1 / 3, 1 / 3, 1 / 3, 0.0]]))


def test_one_step_per_response_is_grpo_s_outcome_advantage():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0],
                         [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    scores = torch.randn(6)
    last = mask.sum(1) - 1
    ends = torch.zeros_like(mask, dtype=torch.bool).scatter(1, last[:, None], True)
    rewards = torch.zeros(6, 5).scatter(1, last[:, None], scores[:, None])
    out = process_advantages(rewards, ends, mask, group_size=3)
    outcome = group_advantages(scores, 3)[:, None].expand(6, 5) * mask
    assert torch.allclose(out, outcome, atol=1e-6)


def test_a_group_with_one_step_has_no_advantage_and_groups_must_split():
    mask = torch.ones(2, 3)
    ends = torch.tensor([[False, False, True], [False, False, False]])
    assert torch.equal(process_advantages(torch.full((2, 3), 5.0), ends, mask, 2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        process_advantages(torch.zeros(2, 3), ends, mask, 4)
    with pytest.raises(ValueError, match="one shape"):
        process_advantages(torch.zeros(2, 4), ends, mask, 2)


def test_step_ends_at_separators_and_at_each_turn_s_last_token():
    SEP = 9
    ids = torch.tensor([[5, 9, 6, 9, 7, 0], [9, 4, 4, 4, 9, 9]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 1, 0]])  # row 1: a turn, an observation, a turn
    ends = step_ends(ids, mask, [SEP])
    assert ends.tolist() == [[False, True, False, True, True, False], [True, True, False, False, True, False]]
