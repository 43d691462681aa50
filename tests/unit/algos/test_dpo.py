"""DPO and IPO losses at hand-worked log-ratios."""

import math

import pytest
import torch

from tether.algos.dpo import dpo_loss, implicit_rewards, log_ratio_gap

# Policy: chosen -1, rejected -2; reference: both -1.5. h = (-1 + 1.5) - (-2 + 1.5) = 0.5 + 0.5 = 1.
PC, PR, RC, RR = (torch.tensor([v]) for v in (-1.0, -2.0, -1.5, -1.5))


def test_log_ratio_gap():
    assert float(log_ratio_gap(PC, PR, RC, RR)) == pytest.approx(1.0)


def test_dpo_sigmoid_loss():
    # beta 0.1: -log sigmoid(0.1) = log(1 + e^-0.1) = 0.6443967
    assert float(dpo_loss(PC, PR, RC, RR, 0.1)) == pytest.approx(math.log(1 + math.exp(-0.1)), abs=1e-6)
    assert float(dpo_loss(PC, PR, RC, RR, 0.1)) == pytest.approx(0.6443967, abs=1e-6)


def test_label_smoothing():
    # 0.9 * log(1 + e^-0.1) + 0.1 * log(1 + e^0.1) = 0.9 * 0.6443967 + 0.1 * 0.7443967 = 0.6543967
    assert float(dpo_loss(PC, PR, RC, RR, 0.1, label_smoothing=0.1)) == pytest.approx(0.6543967, abs=1e-6)


def test_ipo_loss():
    # (h - 1 / (2 beta))^2 = (1 - 5)^2 = 16 at beta 0.1; 0 when the gap is exactly 1/(2 beta) (beta 0.5).
    assert float(dpo_loss(PC, PR, RC, RR, 0.1, "ipo")) == pytest.approx(16.0)
    assert float(dpo_loss(PC, PR, RC, RR, 0.5, "ipo")) == pytest.approx(0.0)


def test_at_the_reference_the_loss_is_log_2_and_the_gradient_favours_chosen():
    pc, pr = torch.tensor([-3.0], requires_grad=True), torch.tensor([-4.0], requires_grad=True)
    loss = dpo_loss(pc, pr, pc.detach(), pr.detach(), 0.5)
    assert float(loss) == pytest.approx(math.log(2))
    loss.backward()
    # d/dpc of -log sigmoid(beta h) at h = 0: -beta * sigmoid(0) = -0.25; rejected gets +0.25.
    assert float(pc.grad) == pytest.approx(-0.25) and float(pr.grad) == pytest.approx(0.25)


def test_implicit_rewards():
    assert torch.allclose(implicit_rewards(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.5]), 0.1),
                          torch.tensor([0.05, -0.05]))


def test_unknown_loss():
    with pytest.raises(ValueError, match="sigmoid"):
        dpo_loss(PC, PR, RC, RR, 0.1, "hinge")
