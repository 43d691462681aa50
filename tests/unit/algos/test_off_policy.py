"""Off-policy correction weights (TIS, MIS) on hand-worked values, the non-finite rule, and their
place in the PPO surrogate."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.losses import ppo_policy_loss
from tether.algos.off_policy import behaviour_ratio, is_stats, is_weights, nonfinite_tokens, token_mismatch

# log pi_old - log mu per token: ln 0.5, 0, ln 3, ln 1.5 | ln 4, (padding: huge)
OLD = torch.tensor([[math.log(0.5), 0.0, math.log(3.0), math.log(1.5)], [math.log(4.0), 50.0, 0.0, 0.0]])
MU = torch.zeros(2, 4)
MASK = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])


def test_behaviour_ratio_is_pi_old_over_mu_and_one_on_padding():
    ratio = behaviour_ratio(OLD, MU, MASK)
    torch.testing.assert_close(ratio, torch.tensor([[0.5, 1.0, 3.0, 1.5], [4.0, 1.0, 1.0, 1.0]]))


def test_truncated_weights_hand_worked():
    weights, over = is_weights(OLD, MU, MASK, "tis", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 2.0, 1.5], [2.0, 1.0, 1.0, 1.0]]))
    assert over.tolist() == [[False, False, True, False], [True, False, False, False]]
    stats = is_stats(weights, over, MASK)
    assert stats["rollout/is_weight_mean"] == pytest.approx((0.5 + 1 + 2 + 1.5 + 2) / 5)
    assert stats["rollout/is_clipped_frac"] == pytest.approx(2 / 5)


def test_masked_weights_are_the_ratio_under_the_cap_and_zero_above():
    """MIS as the literature defines it: w = rho * 1[rho <= cap], not 1 * 1[rho <= cap]."""
    weights, over = is_weights(OLD, MU, MASK, "mis", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 0.0, 1.5], [0.0, 1.0, 1.0, 1.0]]))
    assert over.tolist() == [[False, False, True, False], [True, False, False, False]]
    stats = is_stats(weights, over, MASK)
    assert stats["rollout/is_weight_mean"] == pytest.approx((0.5 + 1 + 0 + 1.5 + 0) / 5)
    assert stats["rollout/is_clipped_frac"] == pytest.approx(2 / 5)


def test_a_ratio_exactly_at_the_cap_is_kept_whole():
    cap = float(torch.exp(torch.tensor(math.log(2.0))))  # exactly the float32 ratio below
    old = torch.tensor([[math.log(2.0), math.log(2.0) + 1e-3]])
    for mode, above in (("mis", 0.0), ("tis", cap)):
        weights, over = is_weights(old, torch.zeros(1, 2), torch.ones(1, 2), mode, cap=cap)
        assert weights[0, 0].item() == cap and weights[0, 1].item() == pytest.approx(above)
        assert over.tolist() == [[False, True]]


def test_a_finite_log_ratio_past_exps_range_is_over_the_cap():
    # log-ratio 100: exp overflows float32 to inf, a finite log-ratio all the same: truncated or masked.
    old = torch.tensor([[100.0, 0.0]])
    for mode, expected in (("tis", [2.0, 1.0]), ("mis", [0.0, 1.0])):
        weights, over = is_weights(old, torch.zeros(1, 2), torch.ones(1, 2), mode, cap=2.0)
        assert weights.tolist() == [expected] and over.tolist() == [[True, False]]


INF = float("inf")
NAN = float("nan")
# Real tokens: NaN, -inf and +inf behaviour log-probs, a NaN pi_old, then two ordinary tokens
# (ratios 0.5 and 3); the second row's padding holds NaN, which is never a real token.
NF_OLD = torch.tensor([[0.0, 0.0, 0.0, NAN, math.log(0.5), math.log(3.0)], [0.0, NAN, 0.0, 0.0, 0.0, 0.0]])
NF_MU = torch.tensor([[NAN, -INF, INF, 0.0, 0.0, 0.0], [0.0, NAN, NAN, 0.0, 0.0, 0.0]])
NF_MASK = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0]])


@pytest.mark.parametrize("mode, expected", [("tis", [0.0, 0.0, 0.0, 0.0, 0.5, 2.0]),
                                            ("mis", [0.0, 0.0, 0.0, 0.0, 0.5, 0.0])])
def test_a_nonfinite_log_ratio_weighs_zero(mode, expected):
    """NaN or inf in log pi_old - log mu: weight 0 under tis and mis (NaN must not reach the loss,
    and a -inf engine log-prob, ratio +inf, must not get the cap), not counted as over the cap."""
    weights, over = is_weights(NF_OLD, NF_MU, NF_MASK, mode, cap=2.0)
    assert weights.tolist() == [expected, [1.0] * 6]
    assert bool(torch.isfinite(weights).all())
    assert over.tolist() == [[False] * 5 + [True], [False] * 6]
    bad = nonfinite_tokens(NF_OLD, NF_MU, NF_MASK)
    assert bad.tolist() == [[True, True, True, True, False, False], [False] * 6]
    stats = is_stats(weights, over, NF_MASK, bad)
    assert stats["rollout/is_nonfinite_frac"] == pytest.approx(4 / 7)
    assert stats["rollout/is_clipped_frac"] == pytest.approx(1 / 7)
    assert stats["rollout/is_weight_mean"] == pytest.approx((sum(expected) + 1) / 7)
    assert "rollout/is_nonfinite_frac" not in is_stats(weights, over, NF_MASK)


def test_none_ignores_nonfinite_behaviour_logprobs():
    weights, over = is_weights(NF_OLD, NF_MU, NF_MASK, "none", cap=2.0)
    assert bool((weights == 1).all()) and not bool(over.any())


def test_a_nan_engine_logprob_leaves_the_loss_and_gradient_finite():
    """Under tis the NaN token's surrogate term is dropped: the loss is the other tokens' weighted
    terms over all 3 tokens, and the NaN token's gradient is 0."""
    logp = torch.zeros(1, 3, requires_grad=True)
    old = torch.zeros(1, 3)
    behaviour = torch.tensor([[NAN, math.log(2.0), 0.0]])  # weights 0, 0.5, 1
    adv = torch.tensor([[1.0, 2.0, -1.0]])
    mask = torch.ones(1, 3)
    weights, _ = is_weights(old, behaviour, mask, "tis", cap=2.0)
    out = ppo_policy_loss(logp, old, adv, mask, 0.2, weights=weights)
    out.loss.backward()
    # -(0 * 1 + 0.5 * 2 + 1 * -1) / 3 = 0
    assert float(out.loss.detach()) == pytest.approx(0.0, abs=1e-7)
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.0 / 3, 1.0 / 3]]))


def test_none_weighs_every_token_one_and_unknown_modes_are_refused():
    weights, over = is_weights(OLD, MU, MASK, "none", cap=2.0)
    assert bool((weights == 1).all()) and not bool(over.any())
    with pytest.raises(ValueError, match="expected one of none, tis, mis"):
        is_weights(OLD, MU, MASK, "clip", cap=2.0)


def test_weights_carry_no_gradient():
    old = OLD.clone().requires_grad_(True)
    weights, _ = is_weights(old, MU, MASK, "tis", cap=2.0)
    assert not weights.requires_grad


def test_weighted_ppo_surrogate_hand_worked():
    """Two tokens, ratio 1 (logp = old), advantages 2 and -1, weights 0.5 and 2: the loss is
    -(0.5 * 2 + 2 * -1) / 2 = 0.5, and each token's gradient is scaled by its weight."""
    logp = torch.zeros(1, 2, requires_grad=True)
    old = torch.zeros(1, 2)
    adv = torch.tensor([[2.0, -1.0]])
    mask = torch.ones(1, 2)
    out = ppo_policy_loss(logp, old, adv, mask, 0.2, weights=torch.tensor([[0.5, 2.0]]))
    assert float(out.loss) == pytest.approx(0.5)
    out.loss.backward()
    # d/dlogp of -(w * r * A)/2 at r = 1: -w * A / 2
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, 1.0]]))
    plain = ppo_policy_loss(logp.detach(), old, adv, mask, 0.2)
    unit = ppo_policy_loss(logp.detach(), old, adv, mask, 0.2, weights=torch.ones(1, 2))
    assert float(plain.loss) == float(unit.loss) == pytest.approx(-0.5)


def test_token_mismatch_hand_worked():
    # sampled tokens of row 0: |−1 − (−1.25)| = 0.25, |−2 − (−2)| = 0, (hole: 3 vs −3 is ignored),
    # |−0.5 − (−1)| = 0.5; row 1: |−4 − (−3.75)| = 0.25, then padding (NaN there is ignored)
    # -> max = 0.5
    trainer = torch.tensor([[-1.0, -2.0, 3.0, -0.5], [-4.0, NAN, 0.0, 0.0]])
    engine = torch.tensor([[-1.25, -2.0, -3.0, -1.0], [-3.75, 0.0, NAN, 0.0]])
    mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0]])
    assert token_mismatch(trainer, engine, mask) == 0.5
    assert token_mismatch(trainer[1:], engine[1:], mask[1:]) == 0.25


def test_token_mismatch_identical_empty_and_nan():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, NAN]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert token_mismatch(logp, logp.clone(), mask) == 0.0
    assert token_mismatch(logp, torch.full_like(logp, 5.0), torch.zeros(2, 2)) == 0.0  # no sampled token
    assert token_mismatch(torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3)) == 0.0
    assert math.isnan(token_mismatch(logp, logp, torch.ones(2, 2)))  # a NaN on a sampled token shows


def test_mismatch_rate_counts_sampled_tokens_beyond_the_tolerance():
    from tether.algos.off_policy import mismatch_rate

    trainer = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-0.5, -0.5, -9.0, 0.0]])
    engine = torch.tensor([[-1.0, -2.05, -5.0, -4.0], [-0.5, float("nan"), 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    # sampled diffs: 0, 0.05, 2.0 | 0, nan -> beyond 0.1: 2.0 and nan, 2 of 5
    assert mismatch_rate(trainer, engine, mask, 0.1) == pytest.approx(2 / 5)
    assert mismatch_rate(trainer, engine, mask, 3.0) == pytest.approx(1 / 5)  # the NaN still counts
    assert mismatch_rate(trainer, engine, torch.zeros_like(mask), 0.1) == 0.0
