"""Off-policy correction weights (TIS, MIS) on hand-worked values, and their place in the PPO
surrogate."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.losses import ppo_policy_loss
from tether.algos.off_policy import behaviour_ratio, is_stats, is_weights

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


def test_masked_weights_drop_tokens_over_the_cap():
    weights, over = is_weights(OLD, MU, MASK, "mis", cap=2.0)
    assert weights.tolist() == [[1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 1.0, 1.0]]
    assert is_stats(weights, over, MASK)["rollout/is_weight_mean"] == pytest.approx(3 / 5)


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
