"""SimPO, ORPO and KTO against hand-worked values (algos/preference.py)."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.preference import kto_loss, kto_reference_point, log_odds, orpo_loss, simpo_loss


def t(*values):
    return torch.tensor(values, dtype=torch.float32)


def test_simpo_compares_length_normalised_log_probs_with_a_margin():
    # chosen: -4 over 2 tokens (mean -2); rejected: -9 over 3 tokens (mean -3); beta 2, gamma 1:
    # 2 * (-2 - -3) - 1 = 1, and -log sigmoid(1) = log(1 + e^-1) = 0.3132617.
    loss = simpo_loss(t(-4.0), t(-9.0), t(2.0), t(3.0), beta=2.0, gamma=1.0)
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    # The summed log-probs alone would prefer the chosen by 5 nats; per token the gap is 1.
    equal_per_token = simpo_loss(t(-4.0), t(-6.0), t(2.0), t(3.0), beta=2.0, gamma=0.0)
    assert float(equal_per_token) == pytest.approx(math.log(2), abs=1e-6)


def test_simpo_pushes_the_chosen_up_and_the_rejected_down():
    chosen, rejected = t(-4.0).requires_grad_(), t(-9.0).requires_grad_()
    simpo_loss(chosen, rejected, t(2.0), t(3.0), beta=2.0, gamma=1.0).backward()
    assert float(chosen.grad) < 0 < float(rejected.grad)


def test_log_odds_of_a_probability():
    assert log_odds(t(math.log(0.5))).tolist() == pytest.approx([0.0], abs=1e-6)
    assert log_odds(t(math.log(0.2))).tolist() == pytest.approx([math.log(0.25)], abs=1e-6)
    assert log_odds(t(math.log(0.999))).tolist() == pytest.approx([math.log(999)], rel=1e-3)  # near 1: no cancelling
    assert torch.isfinite(log_odds(t(0.0))).all()  # P = 1 stays finite


def test_orpo_adds_the_odds_ratio_term_to_the_chosen_nll():
    # P_c = 0.5 (odds 1, log odds 0), P_r = 0.2 (odds 0.25): the log odds ratio is log 4, and
    # -log sigmoid(log 4) = log(1 + 1/4) = 0.2231436. NLL 0.6931472, lambda 0.1: 0.7154615.
    loss, term = orpo_loss(t(math.log(0.5)), t(math.log(0.2)), torch.tensor(math.log(2)), lam=0.1)
    assert float(term) == pytest.approx(math.log(1.25), abs=1e-6)
    assert float(loss) == pytest.approx(math.log(2) + 0.1 * math.log(1.25), abs=1e-6)


def test_kto_reference_point_is_a_non_negative_mean_without_gradient():
    policy = t(0.0, 0.4, 0.2).requires_grad_()
    assert float(kto_reference_point(policy, t(1.0, 0.0, 0.0))) == 0.0  # mean -0.133: clamped at 0
    z0 = kto_reference_point(t(2.0, 0.0, 0.5), t(1.0, 0.0, 0.0))
    assert float(z0) == pytest.approx(0.5) and not z0.requires_grad


def test_kto_weighs_desirable_and_undesirable_rows_against_the_reference_point():
    # beta 1, z0 0.5: a desirable row with r = 2 costs 1 - sigmoid(1.5) = 0.1824255; an undesirable
    # row with r = -1 costs 1 - sigmoid(0.5 - -1) = the same.
    policy, ref, label = t(2.0, -1.0), t(0.0, 0.0), torch.tensor([True, False])
    one_minus = 1 - 1 / (1 + math.exp(-1.5))
    assert float(kto_loss(policy, ref, label, 0.5, beta=1.0)) == pytest.approx(one_minus, abs=1e-6)
    # lambda_D = 2 doubles the desirable row's cost: (2 * 0.1824255 + 0.1824255) / 2.
    weighted = kto_loss(policy, ref, label, 0.5, beta=1.0, desirable_weight=2.0)
    assert float(weighted) == pytest.approx(1.5 * one_minus, abs=1e-6)


def test_kto_raises_desirable_rows_and_lowers_undesirable_ones():
    policy = t(0.3, 0.3).requires_grad_()
    kto_loss(policy, t(0.0, 0.0), torch.tensor([True, False]), 0.1, beta=0.5).backward()
    assert float(policy.grad[0]) < 0 < float(policy.grad[1])
