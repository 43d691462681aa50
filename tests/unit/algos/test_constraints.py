"""The Lagrangian pieces of a constrained objective, against hand-worked values."""

from __future__ import annotations

import pytest
import torch

from tether.algos.constraints import constrained_score, dual_ascent, violation


def test_the_violation_is_the_cost_above_its_limit():
    assert violation(torch.tensor([0.5, 0.1]), torch.tensor([0.3, 0.3])).tolist() == pytest.approx([0.2, -0.2])


def test_a_dual_ascent_step_is_projected_onto_zero_and_the_cap():
    lam = torch.tensor([0.0, 1.0, 4.9])
    cost = torch.tensor([0.5, 0.1, 0.9])
    limit = torch.tensor([0.3, 0.3, 0.3])
    # 0 + 2*(0.2) = 0.4;  1 + 2*(-0.2) = 0.6;  4.9 + 2*(0.6) = 6.1 -> capped at 5
    assert dual_ascent(lam, cost, limit, lr=2.0, max_multiplier=5.0).tolist() == pytest.approx([0.4, 0.6, 5.0])
    # a met constraint's multiplier falls to 0, never below
    assert dual_ascent(torch.tensor([0.1]), torch.tensor([0.0]), torch.tensor([0.3]), 1.0, 5.0).tolist() == [0.0]
    with pytest.raises(ValueError, match="lr > 0"):
        dual_ascent(lam, cost, limit, lr=0.0, max_multiplier=5.0)


def test_the_shaped_score_is_safe_rlhfs_normalised_lagrangian():
    reward = torch.tensor([1.0, 0.0])
    costs = torch.tensor([[1.0, 0.0], [0.5, 2.0]])
    lam = torch.tensor([0.5, 1.5])
    # row 0: (1 - 0.5*1 - 1.5*0) / (1 + 2) = 0.5/3;  row 1: (0 - 0.25 - 3) / 3 = -3.25/3
    assert constrained_score(reward, costs, lam).tolist() == pytest.approx([0.5 / 3, -3.25 / 3])
    assert torch.equal(constrained_score(reward, costs, torch.zeros(2)), reward)  # no multiplier: the reward
    with pytest.raises(ValueError, match="do not match"):
        constrained_score(reward, costs, torch.zeros(3))
