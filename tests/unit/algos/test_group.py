"""Hand-worked numbers for the critic-free algorithms' pure functions (tether.algos.group)."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.group import (
    MAX_SEQUENCE_LOG_RATIO,
    aggregate,
    aggregation_weight,
    asymmetric_clipped_surrogate,
    group_advantages,
    grouped,
    importance_ratio,
    reinforce_pp_advantages,
    rloo_advantages,
    sequence_kl_penalty,
)

# Two prompts, three responses each: rewards (1, 2, 3) and (0, 0, 6).
TABLE = torch.tensor([1.0, 2.0, 3.0, 0.0, 0.0, 6.0])


def test_grpo_advantages_of_a_2_by_3_table():
    # Group 1: mean 2, sample std 1. Group 2: mean 2, deviations (-2, -2, 4), var 24/2 = 12, std 3.4641016.
    expected = torch.tensor([-1 / 1.0001, 0.0, 1 / 1.0001, -2 / 3.4642016, -2 / 3.4642016, 4 / 3.4642016])
    assert torch.allclose(group_advantages(TABLE, 3), expected, atol=1e-6)


def test_dr_grpo_only_centres():
    assert torch.equal(group_advantages(TABLE, 3, scale_by_std=False), torch.tensor([-1.0, 0, 1, -2, -2, 4]))


def test_a_group_of_equal_rewards_has_no_advantage():
    assert torch.equal(group_advantages(torch.full((4,), 0.7), 4), torch.zeros(4))


def test_rloo_baseline_is_the_mean_of_the_others():
    # 1 - (2+3)/2 = -1.5, 2 - (1+3)/2 = 0, 3 - 1.5 = 1.5; 0 - (0+6)/2 = -3 (twice), 6 - 0 = 6.
    assert torch.allclose(rloo_advantages(TABLE, 3), torch.tensor([-1.5, 0.0, 1.5, -3.0, -3.0, 6.0]))
    # ... which is k/(k-1) times the GRPO centring.
    assert torch.allclose(rloo_advantages(TABLE, 3), 1.5 * group_advantages(TABLE, 3, scale_by_std=False))
    with pytest.raises(ValueError, match="at least 2"):
        rloo_advantages(TABLE, 1)


def test_rows_must_split_into_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        grouped(TABLE, 4)


def test_sequence_kl_penalty():
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.5, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # 1 - 0.5 * 0.6 = 0.7; 2 - 0.5 * 1.0 = 1.5 (the padded 9 does not count).
    assert torch.allclose(sequence_kl_penalty(torch.tensor([1.0, 2.0]), kl, mask, 0.5), torch.tensor([0.7, 1.5]))


def test_reinforce_pp_returns_and_batch_whitening():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [-0.1, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # Returns-to-go: (1, 1, 1) and (1.9, 2, -). Over the 5 tokens: mean 1.38, sample var 1.088 / 4 = 0.272.
    std = 0.272 ** 0.5
    expected = torch.tensor([[-0.38 / std] * 3, [0.52 / std, 0.62 / std, 0.0]])
    assert torch.allclose(reinforce_pp_advantages(rewards, mask), expected, atol=1e-5)
    # gamma 0.5: (0, 0, 1) -> returns (0.25, 0.5, 1) before whitening.
    one = reinforce_pp_advantages(torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3), gamma=0.5)
    returns = torch.tensor([0.25, 0.5, 1.0])
    assert torch.allclose(one[0], (returns - returns.mean()) / returns.std(), atol=1e-5)


PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 0.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])


@pytest.mark.parametrize("how, expected", [("token_mean", 15 / 5), ("sequence_mean", (2 + 4.5) / 2),
                                           ("fixed_normalizer", 15 / (2 * 4))])
def test_aggregations(how, expected):
    assert float(aggregate(PER_TOKEN, MASK, how, max_tokens=4)) == pytest.approx(expected)


@pytest.mark.parametrize("how", ["token_mean", "sequence_mean", "fixed_normalizer"])
def test_micro_batches_weighted_by_their_share_add_up_to_the_whole(how):
    """What gradient accumulation does: each micro-batch's loss times its share of the weight."""
    g = torch.Generator().manual_seed(0)
    per_token = torch.randn(6, 5, generator=g)
    mask = (torch.arange(5)[None, :] < torch.tensor([5, 1, 3, 4, 2, 5])[:, None]).long()
    whole = aggregate(per_token, mask, how, max_tokens=5)
    parts = [slice(0, 2), slice(2, 3), slice(3, 6)]
    weights = [aggregation_weight(mask[s], how) for s in parts]
    summed = sum(w * aggregate(per_token[s], mask[s], how, max_tokens=5) for s, w in zip(parts, weights))
    assert float(summed / sum(weights)) == pytest.approx(float(whole), abs=1e-6)


def test_asymmetric_clip():
    ratio = torch.tensor([0.5, 1.5, 1.5, 0.5])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    # r=.5,A=1: min(.5, .8) = .5 | r=1.5,A=1: min(1.5, 1.28) = 1.28 | r=1.5,A=-1: min(-1.5, -1.28) = -1.5
    # r=.5,A=-1: min(-.5, -.8) = -.8
    out = asymmetric_clipped_surrogate(ratio, adv, clip_low=0.2, clip_high=0.28)
    assert torch.allclose(out, torch.tensor([0.5, 1.28, -1.5, -0.8]))


# Two responses of 3 and 1 tokens; padding holds NaN, which must never be read.
NAN = float("nan")
RATIO_MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
RATIO_LOGP = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, NAN, NAN]])
RATIO_OLD = torch.tensor([[-1.5, -1.0, -3.0], [-1.0, NAN, 0.0]])


def test_token_ratio_is_one_ratio_per_token():
    # log r = [0.5, -1, 0] and [0.5]; padding gets ratio 1.
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.0), 1.0], [math.exp(0.5), 1.0, 1.0]])
    assert torch.allclose(importance_ratio(RATIO_LOGP, RATIO_OLD, RATIO_MASK, "token"), expected)


def test_sequence_ratio_is_the_geometric_mean_at_every_token():
    # GSPO: exp(mean log r) = exp(-0.5 / 3) for the first response, exp(0.5) for the second.
    s0, s1 = math.exp(-0.5 / 3), math.exp(0.5)
    expected = torch.tensor([[s0, s0, s0], [s1, 1.0, 1.0]])
    assert torch.allclose(importance_ratio(RATIO_LOGP, RATIO_OLD, RATIO_MASK, "sequence"), expected)


def test_sequence_product_ratio_is_the_whole_likelihood_ratio():
    # TRL's RLOO: exp(sum log r) = pi(y) / pi_old(y) = exp(-0.5) and exp(0.5).
    s0, s1 = math.exp(-0.5), math.exp(0.5)
    expected = torch.tensor([[s0, s0, s0], [s1, 1.0, 1.0]])
    assert torch.allclose(importance_ratio(RATIO_LOGP, RATIO_OLD, RATIO_MASK, "sequence_product"), expected)


def test_sequence_ratio_gradient_is_spread_over_the_response():
    # d/d logp_t of sum_t s = |y| * s * (1 / |y|) = s at each token; nothing reaches padding.
    logp = RATIO_LOGP.clone().requires_grad_(True)
    importance_ratio(logp, RATIO_OLD, RATIO_MASK, "sequence").sum().backward()
    s0, s1 = math.exp(-0.5 / 3), math.exp(0.5)
    assert torch.allclose(logp.grad, torch.tensor([[s0, s0, s0], [s1, 0.0, 0.0]]))


def test_unknown_ratio_level():
    with pytest.raises(ValueError, match="ratio level"):
        importance_ratio(RATIO_LOGP, RATIO_OLD, RATIO_MASK, "response")


# sequence_product overflow: float32's exp passes its range at a log-ratio of ~88.7. The summed
# log-ratio s is spread over 4 tokens; the clip is (0.2, 0.28) and the loss the response's
# -surrogate (sequence_mean of one response).
CAP = MAX_SEQUENCE_LOG_RATIO
LOG_RATIOS = [0.0, 19.0, 50.0, -50.0, 88.0, -88.0, 89.0, -89.0, 1e3, -1e3, 1e4, -1e4]


def expected_loss_and_token_grad(s: float, adv: float, low: float = 0.2, high: float = 0.28):
    """By hand, in float64: r = exp(min(s, cap)); loss = -min(r*A, clip(r)*A); d loss / d logp_t is
    -A*r on the unclipped branch below the cap, 0 on the clipped branch or above the cap."""
    r = math.exp(min(s, CAP))
    unclipped, clipped = r * adv, min(max(r, 1 - low), 1 + high) * adv
    grad = -adv * r if unclipped <= clipped and s < CAP else 0.0
    return -min(unclipped, clipped), grad


@pytest.mark.parametrize("adv", [1.0, -1.0])
@pytest.mark.parametrize("s", LOG_RATIOS)
def test_sequence_product_is_finite_in_value_and_gradient(s, adv):
    logp = torch.full((1, 4), s / 4, requires_grad=True)
    old, mask = torch.zeros(1, 4), torch.ones(1, 4)
    ratio = importance_ratio(logp, old, mask, "sequence_product")
    loss = -aggregate(asymmetric_clipped_surrogate(ratio, torch.full((1, 4), adv), 0.2, 0.28), mask, "sequence_mean")
    loss.backward()
    value, grad = expected_loss_and_token_grad(s, adv)
    assert math.isfinite(float(loss.detach())) and bool(torch.isfinite(logp.grad).all())
    assert float(loss.detach()) == pytest.approx(value, rel=1e-5, abs=1e-30)
    torch.testing.assert_close(logp.grad, torch.full((1, 4), grad), rtol=1e-5, atol=1e-30)


def test_sequence_product_hand_worked_beyond_the_cap():
    # A = 1: the clip holds the surrogate at 1.28 from r = 1.28 on, gradient 0: the cap changes nothing.
    assert expected_loss_and_token_grad(1e4, 1.0) == (-1.28, 0.0)
    # A = -1: r*A held at -e^20 (a dual clip at e^20), gradient 0 beyond it; just under: -A * e^19.
    assert expected_loss_and_token_grad(50.0, -1.0) == (math.exp(20.0), 0.0)
    assert expected_loss_and_token_grad(19.0, -1.0) == (math.exp(19.0), math.exp(19.0))
    # s = -50, A = 1: the unclipped branch, r = e^-50, gradient -e^-50.
    assert expected_loss_and_token_grad(-50.0, 1.0) == (-math.exp(-50.0), -math.exp(-50.0))


@pytest.mark.parametrize("s", [1e4, -1e4, 89.0 * 4])
def test_sequence_ratio_is_finite_for_huge_mean_log_ratios(s):
    logp = torch.full((1, 4), s / 4, requires_grad=True)
    ratio = importance_ratio(logp, torch.zeros(1, 4), torch.ones(1, 4), "sequence")
    ratio.sum().backward()
    assert bool(torch.isfinite(ratio).all()) and bool(torch.isfinite(logp.grad).all())
    assert float(ratio.detach()[0, 0]) == pytest.approx(math.exp(min(s / 4, CAP)), rel=1e-6)


def test_token_ratios_are_not_capped():
    assert float(importance_ratio(torch.tensor([[30.0]]), torch.zeros(1, 1), torch.ones(1, 1), "token")) == \
        pytest.approx(math.exp(30.0), rel=1e-6)


# RLOO's estimator (Ahmadian et al. 2024, eq. 6) at ratio 1: the loss gradient at logp_{i,t} is
# -A_i / B with sequence_product and sequence_mean. Other settings reweigh response i (|y_i| its
# length, T = sum of lengths, M = max_tokens): the weights docs/algorithms.md states.
LENGTHS = torch.tensor([1, 2, 3])
EST_MASK = (torch.arange(3)[None, :] < LENGTHS[:, None]).long()
EST_ADV = torch.tensor([1.5, -0.5, -1.0])
B, T, M = 3, 6, 3


@pytest.mark.parametrize("level, how, per_response", [
    ("sequence_product", "sequence_mean", lambda n: 1 / B),  # the paper's
    ("token", "sequence_mean", lambda n: 1 / (B * n)),
    ("sequence", "sequence_mean", lambda n: 1 / (B * n)),
    ("token", "token_mean", lambda n: 1 / T),
    ("sequence", "token_mean", lambda n: 1 / T),
    ("token", "fixed_normalizer", lambda n: 1 / (B * M)),
    ("sequence", "fixed_normalizer", lambda n: 1 / (B * M)),
    ("sequence_product", "token_mean", lambda n: n / T),
    ("sequence_product", "fixed_normalizer", lambda n: n / (B * M)),
])
def test_the_ratio_one_gradient_of_each_level_and_aggregation(level, how, per_response):
    logp = torch.full((3, 3), -1.0, requires_grad=True)
    ratio = importance_ratio(logp, logp.detach(), EST_MASK, level)
    adv = EST_ADV[:, None].expand(3, 3)
    loss = -aggregate(asymmetric_clipped_surrogate(ratio, adv, 0.2, 0.2), EST_MASK, how, max_tokens=M)
    loss.backward()
    weight = torch.tensor([per_response(float(n)) for n in LENGTHS])
    expected = torch.where(EST_MASK.bool(), -EST_ADV[:, None] * weight[:, None], torch.zeros(3, 3))
    torch.testing.assert_close(logp.grad, expected)
