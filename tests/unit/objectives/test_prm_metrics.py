"""The process reward model's loss and held-out metrics, hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from tether.objectives.prm import step_loss, step_metrics


def test_step_loss_is_the_bce_over_the_valid_steps_only():
    scores = torch.tensor([[0.0, 2.0], [-1.0, 99.0]])
    labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    valid = torch.tensor([[True, True], [True, False]])  # row 1 has one step; its padding holds garbage
    # -log s(0) = ln 2; -log(1 - s(2)) = ln(1 + e^2); -log(1 - s(-1)) = ln(1 + e^-1)
    expected = (math.log(2) + math.log(1 + math.e ** 2) + math.log(1 + math.e ** -1)) / 3
    assert float(step_loss(scores, labels, valid)) == pytest.approx(expected)


def test_step_and_solution_accuracy():
    scores = [torch.tensor([1.5, -0.5, 2.0]), torch.tensor([-3.0]), torch.tensor([0.5, 0.25])]
    labels = [torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0]), torch.tensor([1.0, 1.0])]
    out = step_metrics(scores, labels)
    assert out["eval/step_accuracy"] == pytest.approx(5 / 6)  # only the first solution's last step is wrong
    assert out["eval/solution_accuracy"] == pytest.approx(2 / 3)
    assert out["eval/score_mean"] == pytest.approx((1.5 - 0.5 + 2.0 - 3.0 + 0.5 + 0.25) / 6)
