"""Multi-turn episodes: turns of the action mask, per-turn rewards placed on tokens, episode
totals and the shaped per-token reward, on hand-worked values; the single-turn case is
shape_rewards bit for bit."""

from __future__ import annotations

import pytest
import torch

from tether.algos.rewards import shape_rewards
from tether.algos.turns import episode_totals, place_turn_rewards, shape_episode_rewards, turn_ends

NAN = float("nan")
# row 0: turn, observation (2 tokens), turn, padding | row 1: one turn, right-padded
# row 2: no sampled token | row 3: opens on an observation, then turns at 1 and 3-5
MASK = torch.tensor([
    [1, 1, 0, 0, 1, 0],
    [1, 1, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 0],
    [0, 1, 0, 1, 1, 1],
])


def test_turn_ends_hand_worked():
    expected = [
        [False, True, False, False, True, False],
        [False, False, True, False, False, False],
        [False] * 6,
        [False, True, False, False, False, True],
    ]
    for m in (MASK, MASK.bool(), MASK.float()):
        ends = turn_ends(m)
        assert ends.dtype == torch.bool and ends.tolist() == expected
    assert turn_ends(MASK).sum(1).tolist() == [2, 1, 0, 2]


def test_turn_ends_edges():
    assert turn_ends(torch.ones(1, 1)).tolist() == [[True]]
    assert turn_ends(torch.tensor([[1, 0, 1, 0, 1]])).tolist() == [[True, False, True, False, True]]
    assert turn_ends(torch.zeros(0, 3)).shape == (0, 3)


def test_place_turn_rewards_hand_worked():
    # row 0: 0.5 at turn 0's end (token 1), 2.0 at turn 1's end (token 4)
    # row 1: one turn; column 1 is NaN (no such turn)            -> 1.5 at token 2
    # row 2: no turn, all NaN                                     -> nothing
    # row 3: turn 0 left unscored (NaN), -1.0 at turn 1's end (token 5)
    rewards = torch.tensor([[0.5, 2.0], [1.5, NAN], [NAN, NAN], [NAN, -1.0]])
    placed = place_turn_rewards(rewards, MASK)
    torch.testing.assert_close(placed, torch.tensor([
        [0.0, 0.5, 0.0, 0.0, 2.0, 0.0],
        [0.0, 0.0, 1.5, 0.0, 0.0, 0.0],
        [0.0] * 6,
        [0.0, 0.0, 0.0, 0.0, 0.0, -1.0],
    ]))
    assert not placed.isnan().any()


def test_place_turn_rewards_more_rewards_than_turns_names_the_row():
    rewards = torch.tensor([[0.5, 2.0], [1.5, 3.0], [NAN, NAN], [NAN, -1.0]])  # row 1 has 1 turn
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        place_turn_rewards(rewards, MASK)
    with pytest.raises(ValueError, match=r"rows \[0, 2\]"):
        place_turn_rewards(torch.tensor([[1.0, NAN, 2.0], [1.0, NAN, NAN], [0.0, NAN, NAN]]),
                           torch.tensor([[1, 0, 1], [1, 1, 1], [0, 0, 0]]))


def test_place_turn_rewards_fewer_columns_than_turns_and_dtype():
    # three turns, one reward column: only turn 0 is scored; float64 stays float64
    mask = torch.tensor([[1, 0, 1, 0, 1]])
    placed = place_turn_rewards(torch.tensor([[0.25]], dtype=torch.float64), mask)
    assert placed.dtype == torch.float64 and placed.tolist() == [[0.25, 0.0, 0.0, 0.0, 0.0]]
    assert place_turn_rewards(torch.zeros(1, 0), mask).tolist() == [[0.0] * 5]  # K = 0


def test_episode_totals_hand_worked():
    # sampled tokens of row 0: 0.5 - 0.25 + 2.0 = 2.25 (NaN and 9 on the observation, inf on padding)
    # row 1: 1 + 2 + 3 = 6; row 2: no sampled token -> 0
    token_rewards = torch.tensor([
        [0.5, -0.25, NAN, 9.0, 2.0, float("inf")],
        [1.0, 2.0, 3.0, NAN, NAN, NAN],
        [NAN] * 6,
    ])
    torch.testing.assert_close(episode_totals(token_rewards, MASK[:3]), torch.tensor([2.25, 6.0, 0.0]))
    # placed per-turn rewards total the row's given rewards
    placed = place_turn_rewards(torch.tensor([[0.5, 2.0], [1.5, NAN], [NAN, NAN], [NAN, -1.0]]), MASK)
    torch.testing.assert_close(episode_totals(placed, MASK), torch.tensor([2.5, 1.5, 0.0, -1.0]))


def test_shape_episode_rewards_hand_worked():
    # kl 0.4, beta 0.05 -> -0.02 on each sampled token; rewards 0.5 (token 1) and 2.0 (token 4)
    # rewards    = [-0.02, 0.5 - 0.02, 0, 0, 2.0 - 0.02, 0] = [-0.02, 0.48, 0, 0, 1.98, 0]
    # non_score  = [-0.02, -0.02, 0, 0, -0.02, 0]
    mask = MASK[:1]
    kl = torch.tensor([[0.4, 0.4, NAN, 1e6, 0.4, NAN]])  # garbage on observation and padding
    placed = place_turn_rewards(torch.tensor([[0.5, 2.0]]), mask)
    placed[0, 2] = 7.0  # a reward on an observation token is never read
    rewards, non_score = shape_episode_rewards(placed, kl, 0.05, mask)
    torch.testing.assert_close(rewards, torch.tensor([[-0.02, 0.48, 0.0, 0.0, 1.98, 0.0]]))
    torch.testing.assert_close(non_score, torch.tensor([[-0.02, -0.02, 0.0, 0.0, -0.02, 0.0]]))


@pytest.mark.parametrize("kl_dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("extra_columns", [0, 2])
def test_single_turn_is_shape_rewards_bit_for_bit(kl_dtype, extra_columns):
    # right-padded masks (one turn per row), only the last (= only) turn's reward set
    g = torch.Generator().manual_seed(7)
    B, A = 6, 9
    lengths = torch.randint(1, A + 1, (B,), generator=g)
    mask = (torch.arange(A)[None, :] < lengths[:, None]).long()
    kl = torch.randn(B, A, generator=g, dtype=kl_dtype)
    score = torch.randn(B, generator=g)
    turn_rewards = torch.cat([score[:, None], torch.full((B, extra_columns), NAN)], dim=1)
    placed = place_turn_rewards(turn_rewards, mask)
    rewards, non_score = shape_episode_rewards(placed, kl, 0.05, mask)
    ref_rewards, ref_non_score = shape_rewards(score, kl, 0.05, mask)
    assert torch.equal(rewards, ref_rewards) and torch.equal(non_score, ref_non_score)
    assert rewards.dtype == kl_dtype
