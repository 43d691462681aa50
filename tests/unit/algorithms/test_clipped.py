"""The critic-free actor loss (algorithms/clipped.py) at each ratio level, on hand-worked numbers."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algorithms.clipped import ClippedPolicyLoss
from tether.roles.policy import PolicyOutput
from tether.types import Experience, Rollout

# Two responses of 3 and 1 tokens. log r = [0.5, -1, 0] (advantage -1) and [0.5] (advantage +1).
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
LOGP = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, 0.0, 0.0]])
OLD = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, 0.0, 0.0]])
ADV = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 0.0, 0.0]])


def experience() -> Experience:
    ids = torch.ones(2, 3, dtype=torch.long)
    rollout = Rollout(ids, ids, ids, MASK, torch.tensor([True, True]), ["p", "q"], ["a", "b"])
    return Experience(rollout, OLD, OLD.clone(), None, torch.zeros(2), ADV, ADV, ADV)


def loss_fn(ratio_level: str, aggregation: str = "sequence_mean") -> ClippedPolicyLoss:
    return ClippedPolicyLoss(clip_low=0.2, clip_high=0.2, aggregation=aggregation, max_tokens=3, entropy_coef=0.0,
                             kl_in_loss=False, kl_estimator="k3", kl_coef=0.0, ratio_level=ratio_level)


def test_token_level_is_the_per_token_clip():
    # r = [e^.5, e^-1, 1], A = -1: min(-1.6487, -1.2) = -e^.5, min(-0.3679, -0.8) = -0.8, -1;
    # r = e^.5, A = +1: min(1.6487, 1.2) = 1.2. token_mean of -surrogate: (e^.5 + 0.8 + 1 - 1.2) / 4.
    loss, stats = loss_fn("token", "token_mean")(PolicyOutput(LOGP.clone()), experience())
    assert float(loss) == pytest.approx((math.exp(0.5) + 0.8 + 1.0 - 1.2) / 4, rel=1e-6)
    assert stats["check/ratio_deviation"] == pytest.approx(math.exp(0.5) - 1, rel=1e-6)


def test_token_level_is_the_default_and_unchanged():
    """The default ratio level gives bit for bit the loss the per-token formula gives."""
    default = ClippedPolicyLoss(0.2, 0.28, "token_mean", 3, 0.0, False, "k3", 0.0)
    assert default.ratio_level == "token"
    logp = LOGP.clone().requires_grad_(True)
    loss, _ = default(PolicyOutput(logp), experience())
    loss.backward()
    ratio = torch.exp(torch.where(MASK.bool(), LOGP - OLD, torch.zeros(())))
    surrogate = torch.min(ratio * ADV, torch.clamp(ratio, 0.8, 1.28) * ADV)
    expected = -(surrogate * MASK).sum() / MASK.sum()
    assert torch.equal(loss.detach(), expected)


def test_sequence_level_clips_each_response_as_one():
    # s = exp(-0.5 / 3) = 0.8465 inside [0.8, 1.2], A = -1: surrogate -s at each token;
    # s = e^.5 = 1.6487 clipped to 1.2, A = +1: surrogate 1.2. sequence_mean of -surrogate: (s - 1.2) / 2.
    s0 = math.exp(-0.5 / 3)
    logp = LOGP.clone().requires_grad_(True)
    loss, stats = loss_fn("sequence")(PolicyOutput(logp), experience())
    assert float(loss.detach()) == pytest.approx((s0 - 1.2) / 2, rel=1e-6)
    # The clipped response gives no gradient; the other's loss s / 2 spreads s / 6 over its tokens.
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[s0 / 6, s0 / 6, s0 / 6], [0.0, 0.0, 0.0]]))
    # The loop's ratio check still looks at every token's ratio.
    assert stats["check/ratio_deviation"] == pytest.approx(math.exp(0.5) - 1, rel=1e-6)
    assert stats["ppo/policy/clipfrac"] == pytest.approx(0.5)  # one response of two


def test_sequence_level_token_mean_weighs_responses_by_length():
    s0 = math.exp(-0.5 / 3)
    loss, _ = loss_fn("sequence", "token_mean")(PolicyOutput(LOGP.clone()), experience())
    assert float(loss) == pytest.approx((3 * s0 - 1.2) / 4, rel=1e-6)


def test_sequence_product_is_trls_rloo_objective():
    # pi(y)/pi_old(y) = e^-0.5 = 0.6065 < 0.8 with A = -1: min(-0.6065, -0.8) = -0.8; the second as above.
    # TRL's RLOO loss: the mean over responses of -min(s A, clip(s) A) = (0.8 - 1.2) / 2.
    loss, _ = loss_fn("sequence_product")(PolicyOutput(LOGP.clone()), experience())
    assert float(loss) == pytest.approx((0.8 - 1.2) / 2, rel=1e-6)


def test_at_ratio_one_every_level_is_the_advantage():
    for level in ("token", "sequence", "sequence_product"):
        loss, stats = loss_fn(level)(PolicyOutput(OLD.clone()), experience())
        assert float(loss) == pytest.approx(0.0, abs=1e-7)  # -mean(-1, +1)
        assert stats["check/ratio_deviation"] == 0.0


def test_off_policy_weights_scale_each_tokens_surrogate():
    """rollout.is_correction's weights multiply each token's clipped surrogate: token_mean of
    -w * surrogate with w = [0.5, 0, 2 | 1] gives (0.5 e^.5 + 0 + 2 - 1.2) / 4; weights of 1 are
    the plain loss, bit for bit."""
    import dataclasses

    weighted = dataclasses.replace(experience(), is_weights=torch.tensor([[0.5, 0.0, 2.0], [1.0, 1.0, 1.0]]))
    loss, _ = loss_fn("token", "token_mean")(PolicyOutput(LOGP.clone()), weighted)
    assert float(loss) == pytest.approx((0.5 * math.exp(0.5) + 0.0 + 2.0 - 1.2) / 4, rel=1e-6)
    ones = dataclasses.replace(experience(), is_weights=torch.ones(2, 3))
    plain = loss_fn("token", "token_mean")(PolicyOutput(LOGP.clone()), experience())[0]
    assert torch.equal(loss_fn("token", "token_mean")(PolicyOutput(LOGP.clone()), ones)[0], plain)
