import random

import pytest
import torch

from tether.algos.gae import gae_advantages


def test_hand_worked_three_tokens():
    # gamma = 1, lam = 0.95, rewards [0, 0, 1], values [0.5, 0.6, 0.7]
    # delta_2 = 1 + 0 - 0.7 = 0.3        (V after the last token is 0)
    # delta_1 = 0 + 0.7 - 0.6 = 0.1
    # delta_0 = 0 + 0.6 - 0.5 = 0.1
    # A_2 = 0.3
    # A_1 = 0.1 + 0.95 * 0.3   = 0.385
    # A_0 = 0.1 + 0.95 * 0.385 = 0.46575
    # returns = A + V = [0.96575, 0.985, 1.0]
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.6, 0.7]])
    adv, ret = gae_advantages(r, v, torch.ones(1, 3), gamma=1.0, lam=0.95)
    torch.testing.assert_close(adv, torch.tensor([[0.46575, 0.385, 0.3]]))
    torch.testing.assert_close(ret, torch.tensor([[0.96575, 0.985, 1.0]]))


def test_padding_is_ignored_and_zeroed():
    # same episode with one padded slot holding garbage: identical result, zeros in the pad
    r = torch.tensor([[0.0, 0.0, 1.0, 9.0]])
    v = torch.tensor([[0.5, 0.6, 0.7, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = gae_advantages(r, v, mask, gamma=1.0, lam=0.95)
    torch.testing.assert_close(adv, torch.tensor([[0.46575, 0.385, 0.3, 0.0]]))
    torch.testing.assert_close(ret, torch.tensor([[0.96575, 0.985, 1.0, 0.0]]))


def test_lambda_limits():
    r = torch.tensor([[0.1, -0.2, 1.0]])
    v = torch.tensor([[0.5, 0.6, 0.7]])
    m = torch.ones(1, 3)
    # lam = 1, gamma = 1: returns are Monte-Carlo reward-to-go [0.9, 0.8, 1.0]
    _, ret = gae_advantages(r, v, m, gamma=1.0, lam=1.0)
    torch.testing.assert_close(ret, torch.tensor([[0.9, 0.8, 1.0]]))
    # lam = 0: A_t = delta_t = [0.1 + 0.6 - 0.5, -0.2 + 0.7 - 0.6, 1.0 - 0.7] = [0.2, -0.1, 0.3]
    adv, _ = gae_advantages(r, v, m, gamma=1.0, lam=0.0)
    torch.testing.assert_close(adv, torch.tensor([[0.2, -0.1, 0.3]]))


def _slow_gae(rewards, values, lengths, gamma, lam):
    """Plain-python eq. 16 of Schulman et al. 2016: A_t = sum_l (gamma*lam)^l delta_{t+l}."""
    B, A = len(rewards), len(rewards[0])
    adv = [[0.0] * A for _ in range(B)]
    ret = [[0.0] * A for _ in range(B)]
    for b in range(B):
        n = lengths[b]
        deltas = []
        for t in range(n):
            v_next = values[b][t + 1] if t + 1 < n else 0.0
            deltas.append(rewards[b][t] + gamma * v_next - values[b][t])
        for t in range(n):
            adv[b][t] = sum((gamma * lam) ** l * deltas[t + l] for l in range(n - t))
            ret[b][t] = adv[b][t] + values[b][t]
    return adv, ret


@pytest.mark.parametrize("seed", range(5))
def test_matches_slow_reference_random(seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    B, A = 6, 11
    gamma, lam = rng.uniform(0.8, 1.0), rng.uniform(0.0, 1.0)
    lengths = [rng.randint(1, A) for _ in range(B)]
    lengths[0] = A  # always include a full-length row
    mask = torch.tensor([[1.0] * n + [0.0] * (A - n) for n in lengths])
    rewards = torch.randn(B, A, generator=g, dtype=torch.float64)
    values = torch.randn(B, A, generator=g, dtype=torch.float64)
    adv, ret = gae_advantages(rewards, values, mask, gamma, lam)
    exp_adv, exp_ret = _slow_gae(rewards.tolist(), values.tolist(), lengths, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor(exp_adv, dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor(exp_ret, dtype=torch.float64))
    assert adv.dtype == torch.float64 and adv.shape == (B, A)


@pytest.mark.parametrize("seed", range(3))
def test_a_hole_in_the_mask_is_skipped_not_an_end(seed):
    """A multi-turn episode's observation tokens (0 between 1s): GAE over the sampled tokens is GAE
    over the row with the observations cut out, bit for bit; 0 at the observations."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 0], [1, 0, 1, 1, 0, 1, 0, 0]])
    rewards, values = torch.randn(2, 8, generator=g), torch.randn(2, 8, generator=g)
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.8)
    for row in range(2):
        kept = mask[row].bool()
        n = int(kept.sum())
        want_adv, want_ret = gae_advantages(rewards[row][kept][None], values[row][kept][None], torch.ones(1, n), 0.9, 0.8)
        assert torch.equal(adv[row][kept], want_adv[0]) and torch.equal(ret[row][kept], want_ret[0])
        assert torch.equal(adv[row][~kept], torch.zeros(8 - n)) and torch.equal(ret[row][~kept], torch.zeros(8 - n))
