import math

import pytest
import torch

from tether.algos.losses import (
    bradley_terry_loss,
    clipped_surrogate,
    distilled_bradley_terry_loss,
    entropy_from_logits,
    ppo_policy_loss,
    sft_loss,
    value_loss,
)


# ---------------------------------------------------------------- Bradley-Terry
def test_bt_reference_worked_numbers_and_gradient():
    # 002: r_c = 1.0, r_r = 1.5 -> Delta = -0.5, P = sigmoid(-0.5) = 0.3775, L = -log 0.3775 = 0.9741
    r_c = torch.tensor([1.0], requires_grad=True)
    r_r = torch.tensor([1.5], requires_grad=True)
    loss = bradley_terry_loss(r_c, r_r)
    assert loss.item() == pytest.approx(0.9741, abs=1e-4)
    loss.backward()
    # dL/dDelta = sigmoid(Delta) - 1 = 0.3775 - 1 = -0.6225 ; dL/dr_r = +0.6225
    assert r_c.grad.item() == pytest.approx(-0.6225, abs=1e-4)
    assert r_r.grad.item() == pytest.approx(0.6225, abs=1e-4)


def test_bt_margin_and_batch_mean():
    # margin: 2.0 - 1.0 - 1.5 = -0.5 -> 0.9741 ; Delta = 0 -> log 2 = 0.6931 ; mean = 0.8336
    r_c, r_r = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0])
    assert bradley_terry_loss(r_c, r_r, margin=torch.tensor([1.5, 0.0])).item() == pytest.approx(
        (0.974077 + math.log(2)) / 2, abs=1e-5
    )
    assert bradley_terry_loss(r_c, r_r, margin=0.0).item() == pytest.approx(bradley_terry_loss(r_c, r_r).item())


def test_distilled_bt_by_hand_and_its_minimum():
    # d = 1, teacher margin 0 (p = 0.5): -(0.5 log s(1) + 0.5 log s(-1)) = 0.5 (0.313262 + 1.313262) = 0.813262
    # d = 2, teacher margin ln 3 (p = 0.75): 0.75 * 0.126928 + 0.25 * 2.126928 = 0.626928
    loss = distilled_bradley_terry_loss(torch.tensor([1.0, 2.0]), torch.tensor([0.0, 0.0]),
                                        torch.tensor([0.0, math.log(3)]))
    assert loss.item() == pytest.approx((0.813262 + 0.626928) / 2, abs=1e-5)
    # Least where the student's margin is the teacher's: the gradient in d is sigmoid(d) - p = 0 there.
    d = torch.tensor([math.log(3)], requires_grad=True)
    distilled_bradley_terry_loss(d, torch.zeros(1), torch.tensor([math.log(3)])).backward()
    assert d.grad.item() == pytest.approx(0.0, abs=1e-7)
    # A certain teacher (p -> 1) is the plain Bradley-Terry loss.
    r_c, r_r = torch.tensor([0.3, -1.0]), torch.tensor([0.1, 0.5])
    assert distilled_bradley_terry_loss(r_c, r_r, torch.tensor([60.0, 60.0])).item() == pytest.approx(
        bradley_terry_loss(r_c, r_r).item(), rel=1e-6)


def test_bt_stable_for_large_gaps():
    loss = bradley_terry_loss(torch.tensor([-1000.0]), torch.tensor([0.0]))
    assert loss.item() == pytest.approx(1000.0)  # -log sigmoid(-1000) = 1000, not inf


# ---------------------------------------------------------------- SFT
def test_sft_loss_response_only():
    # response tokens: -2, -3 (row 0) and -6 (row 1): -(-2 - 3 - 6) / 3 = 11/3
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    mask = torch.tensor([[0, 1, 1], [0, 0, 1]])
    assert sft_loss(logp, mask).item() == pytest.approx(11 / 3)


# ---------------------------------------------------------------- PPO clip
@pytest.mark.parametrize(
    "ratio,adv,expected",
    [
        (1.5, 0.4, 0.48),  # 001: min(0.60, 1.2 * 0.4 = 0.48)
        (0.6, -0.3, -0.24),  # 001: min(-0.18, 0.8 * -0.3 = -0.24)
        (3.0, 4.0, 4.8),  # 002: min(12, 1.2 * 4 = 4.8)
        (1.3, -3.0, -3.9),  # 002 hard exercise (errata): min(-3.9, -3.6) = -3.9, NOT -3.6
        (1.3, 2.0, 2.4),  # 004: min(2.6, 2.4)
        (1.1, 2.0, 2.2),  # inside the trust region: unclipped
    ],
)
def test_clipped_surrogate_worked_cases(ratio, adv, expected):
    out = clipped_surrogate(torch.tensor([ratio]), torch.tensor([adv]), 0.2)
    assert out.item() == pytest.approx(expected)


def _policy_inputs():
    ratios = torch.tensor([[1.5, 0.6, 3.0, 1.3, 1.0]], dtype=torch.float64)
    old = torch.tensor([[-1.0, -2.0, -3.0, -0.5, -1.0]], dtype=torch.float64)
    logp = (old + ratios.log()).clone()
    logp[0, 4] = 200.0  # padding: exp(201) overflows; must not leak
    logp.requires_grad_(True)
    adv = torch.tensor([[0.4, -0.3, 4.0, -3.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    return logp, old, adv, mask


def test_ppo_policy_loss_worked():
    logp, old, adv, mask = _policy_inputs()
    out = ppo_policy_loss(logp, old, adv, mask, 0.2)
    # surrogates [0.48, -0.24, 4.8, -3.9] -> mean 1.14 / 4 = 0.285 -> loss -0.285
    assert out.loss.item() == pytest.approx(-0.285)
    # clipped term strictly selected in the first three cases, not in (1.3, -3) -> 3/4
    assert out.clipfrac == pytest.approx(0.75)
    # ratio mean (1.5 + 0.6 + 3 + 1.3) / 4 = 1.6 ; max 3
    assert out.ratio_mean == pytest.approx(1.6)
    assert out.ratio_max == pytest.approx(3.0)
    # 0.5 * (ln1.5^2 + ln0.6^2 + ln3^2 + ln1.3^2) / 4 = 0.5 * 1.701129 / 4 = 0.212641
    assert out.approx_kl == pytest.approx(0.212641, abs=1e-6)
    assert all(isinstance(v, float) for v in (out.clipfrac, out.approx_kl, out.ratio_mean, out.ratio_max))


def test_ppo_policy_loss_gradient():
    logp, old, adv, mask = _policy_inputs()
    ppo_policy_loss(logp, old, adv, mask, 0.2).loss.backward()
    # clipped tokens: zero grad. token 3: d(-r*A/4)/dlogp = -r*A/4 = -(1.3 * -3)/4 = 0.975. padding: 0
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.0, 0.0, 0.975, 0.0]], dtype=torch.float64))


def test_ppo_on_policy_first_step():
    # logp == old_logp: ratio 1, loss = -mean(A) = -(1 - 2 + 4)/3 = -1, nothing clipped
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    adv = torch.tensor([[1.0, -2.0, 4.0]])
    out = ppo_policy_loss(old.clone().requires_grad_(True), old, adv, torch.ones(1, 3), 0.2)
    assert out.loss.item() == pytest.approx(-1.0)
    assert (out.clipfrac, out.approx_kl, out.ratio_mean, out.ratio_max) == (0.0, 0.0, 1.0, 1.0)


# ---------------------------------------------------------------- value loss
def _value_inputs():
    v = torch.tensor([[1.0, 0.6, 0.0, 2.0, 5.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5, 0.5, 0.5, 0.0]])
    ret = torch.tensor([[1.0, 2.0, -1.0, 0.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    return v, old, ret, mask


def test_value_loss_clipped_worked():
    v, old, ret, mask = _value_inputs()
    out = value_loss(v, old, ret, mask, 0.2)
    # tok0: (1-1)^2 = 0      vs v_clip 0.7: 0.09 -> 0.09 (clipped larger)
    # tok1: (0.6-2)^2 = 1.96 vs v_clip 0.6: 1.96 -> 1.96 (equal, not counted)
    # tok2: (0+1)^2 = 1      vs v_clip 0.3: 1.69 -> 1.69 (clipped larger)
    # tok3: (2-0)^2 = 4      vs v_clip 0.7: 0.49 -> 4    (unclipped larger)
    # loss = 0.5 * (0.09 + 1.96 + 1.69 + 4) / 4 = 0.5 * 1.935 = 0.9675 ; clipfrac 2/4
    assert out.loss.item() == pytest.approx(0.9675)
    assert out.clipfrac == pytest.approx(0.5)
    out.loss.backward()
    # grads: tok0/tok2 clipped branch selected -> 0; tok1: (0.6-2)/4 = -0.35; tok3: (2-0)/4 = 0.5
    torch.testing.assert_close(v.grad, torch.tensor([[0.0, -0.35, 0.0, 0.5, 0.0]]))


def test_value_loss_unclipped():
    v, old, ret, mask = _value_inputs()
    out = value_loss(v, old, ret, mask, None)
    # 0.5 * (0 + 1.96 + 1 + 4) / 4 = 0.87
    assert out.loss.item() == pytest.approx(0.87)
    assert out.clipfrac == 0.0


# ---------------------------------------------------------------- entropy
def test_entropy_hand_worked():
    # uniform over 4: ln 4 = 1.386294 ; p = [0.25, 0.75]: 0.25 ln4 + 0.75 ln(4/3) = 0.562335
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3), -math.inf, -math.inf]])
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([math.log(4), 0.562335]))


def test_entropy_stable_and_matches_categorical():
    assert entropy_from_logits(torch.tensor([1000.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 7, generator=g) * 4
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)
    torch.testing.assert_close(entropy_from_logits(logits + 50.0), expected)  # shift invariant


def test_entropy_grad_finite_with_neg_inf():
    logits = torch.tensor([0.3, -0.2, -math.inf], requires_grad=True)
    entropy_from_logits(logits).backward()
    assert torch.isfinite(logits.grad).all()
