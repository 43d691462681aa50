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


# --- mask holes (multi-turn episodes: observation tokens have mask 0 inside the row) ---------


def _gae_right_padded_reference(rewards, values, mask, gamma, lam):
    """gae_advantages as it was before mask holes were skipped (commit 28345da): after a mask-0
    position the recursion restarts from V = A = 0. Kept verbatim as the bitwise reference for
    right-padded masks, where both rules agree."""
    m = mask.bool()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    r = torch.where(m, rewards.to(values.dtype), zero)
    v = torch.where(m, values, zero)
    B, A = v.shape
    next_value = torch.zeros(B, dtype=v.dtype, device=v.device)
    next_adv = torch.zeros(B, dtype=v.dtype, device=v.device)
    cols = []
    for t in reversed(range(A)):
        delta = r[:, t] + gamma * next_value - v[:, t]
        adv = torch.where(m[:, t], delta + gamma * lam * next_adv, zero)
        cols.append(adv)
        next_value, next_adv = v[:, t], adv
    advantages = torch.stack(cols[::-1], dim=1)
    returns = torch.where(m, advantages + v, zero)
    return advantages, returns


@pytest.mark.parametrize("shape", [(1, 1), (4, 1), (3, 7), (8, 33), (0, 5)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (1.0, 0.95), (0.95, 1.0), (0.95, 0.95), (0.99, 0.0)])
def test_right_padded_is_bitwise_the_reference(shape, dtype, gamma, lam):
    B, A = shape
    g = torch.Generator().manual_seed(B * 1000 + A)
    lengths = torch.randint(0, A + 1, (B,), generator=g)  # 0: an all-padding row
    mask = (torch.arange(A)[None, :] < lengths[:, None]).float()
    # garbage (NaN, huge) in the padding must be ignored by both
    rewards = torch.where(mask.bool(), torch.randn(B, A, generator=g, dtype=dtype), torch.tensor(float("nan"), dtype=dtype))
    values = torch.where(mask.bool(), torch.randn(B, A, generator=g, dtype=dtype), torch.tensor(1e30, dtype=dtype))
    for m in (mask, mask.bool(), mask.long()):
        adv, ret = gae_advantages(rewards, values, m, gamma, lam)
        ref_adv, ref_ret = _gae_right_padded_reference(rewards, values, m, gamma, lam)
        assert torch.equal(adv, ref_adv) and torch.equal(ret, ref_ret)
        assert adv.dtype == dtype and adv.shape == (B, A)


def test_hole_hand_worked():
    # mask [1, 1, 0, 0, 1, 0]: turn 1 = tokens 0-1, observation = 2-3 (mask 0), turn 2 = token 4,
    # then padding. gamma = 0.9, lam = 0.5. Rewards/values at mask-0 positions are garbage.
    # Sampled tokens in order: 0, 1, 4 (the hole is no step):
    # t=4: delta = 2 + 0.9*0 - 0.8 = 1.2                 (V after the last sampled token is 0)
    #      A_4   = 1.2
    # t=1: delta = 1 + 0.9*V_4 - 0.4 = 1 + 0.72 - 0.4 = 1.32       (next sampled token is 4)
    #      A_1   = 1.32 + 0.9*0.5*A_4 = 1.32 + 0.54 = 1.86
    # t=0: delta = 0 + 0.9*0.4 - 0.5 = -0.14
    #      A_0   = -0.14 + 0.45*1.86 = -0.14 + 0.837 = 0.697
    # returns = A + V: [1.197, 2.26, 0, 0, 2.0, 0]
    r = torch.tensor([[0.0, 1.0, 5.0, float("nan"), 2.0, 9.0]], dtype=torch.float64)
    v = torch.tensor([[0.5, 0.4, 7.0, float("inf"), 0.8, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]])
    adv, ret = gae_advantages(r, v, mask, gamma=0.9, lam=0.5)
    torch.testing.assert_close(adv, torch.tensor([[0.697, 1.86, 0.0, 0.0, 1.2, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor([[1.197, 2.26, 0.0, 0.0, 2.0, 0.0]], dtype=torch.float64))
    # the old rule would have restarted at the hole: A_1 = 1 + 0 - 0.4 = 0.6, not 1.86
    ref_adv, _ = _gae_right_padded_reference(r, v, mask, 0.9, 0.5)
    assert ref_adv[0, 1].item() == pytest.approx(0.6)


def test_hole_with_leading_observation():
    # mask [0, 1, 1]: a row that opens on context. gamma = 1, lam = 1:
    # t=2: delta = 3 + 0 - 0.5 = 2.5,          A_2 = 2.5
    # t=1: delta = 1 + 1*0.5 - 0.25 = 1.25,    A_1 = 1.25 + 1*1*2.5 = 3.75
    # t=0: mask 0,                             A_0 = 0
    # returns = A + V = [0, 4.0, 3.0]: the reward-to-go 1 + 3 and 3
    r = torch.tensor([[7.0, 1.0, 3.0]])
    v = torch.tensor([[7.0, 0.25, 0.5]])
    adv, ret = gae_advantages(r, v, torch.tensor([[0, 1, 1]]), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.0, 3.75, 2.5]]))
    torch.testing.assert_close(ret, torch.tensor([[0.0, 4.0, 3.0]]))


@pytest.mark.parametrize("seed", range(4))
def test_holes_equal_the_compacted_row(seed):
    """Removing the mask-0 positions of a row and running GAE on the sampled tokens alone gives
    the same advantages and returns at those tokens: holes are skipped, not steps."""
    g = torch.Generator().manual_seed(seed)
    B, A = 5, 13
    mask = torch.rand(B, A, generator=g) < 0.6
    rewards = torch.randn(B, A, generator=g, dtype=torch.float64)
    values = torch.randn(B, A, generator=g, dtype=torch.float64)
    adv, ret = gae_advantages(rewards, values, mask, 0.97, 0.9)
    assert adv[~mask].eq(0).all() and ret[~mask].eq(0).all()
    for b in range(B):
        keep = mask[b]
        n = int(keep.sum())
        c_adv, c_ret = gae_advantages(rewards[b, keep][None], values[b, keep][None], torch.ones(1, n), 0.97, 0.9)
        torch.testing.assert_close(adv[b, keep], c_adv[0])
        torch.testing.assert_close(ret[b, keep], c_ret[0])


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
