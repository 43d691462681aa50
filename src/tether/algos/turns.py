"""Multi-turn episodes: turns in the action mask, rewards placed per turn, episode totals.

One episode is one token sequence. Its response part, (B, A) right-padded, holds the tokens the
policy sampled (action mask 1) and the observation tokens an environment inserted between turns
(action mask 0: context only), then padding (0). A *turn* is a maximal run of 1s in the mask;
its reward lands on its last sampled token. With one turn (a right-padded mask) this is the
single-turn layout of :func:`tether.algos.rewards.shape_rewards`.
"""

from __future__ import annotations

import torch

from tether.algos.masked import masked_sum, zero_padding


def turn_ends(mask: torch.Tensor) -> torch.Tensor:
    """(B, A) mask -> (B, A) bool: True at the last sampled token of each turn (each maximal run
    of 1s), False elsewhere. A row's turn count is ``turn_ends(mask).sum(1)``."""
    m = mask.bool()
    after = torch.zeros_like(m[:, :1])  # past the row's end: not sampled
    return m & ~torch.cat([m[:, 1:], after], dim=1)


def place_turn_rewards(turn_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-turn rewards onto tokens: turn_rewards (B, K) float, mask (B, A) -> (B, A).

    ``turn_rewards[b, k]`` lands on the last sampled token of row b's k-th turn (k from 0, in
    order). NaN means "no reward for this turn": a turn the row does not have (rows with fewer
    turns than K are NaN-padded), or a turn left unscored (only the last turn scored, say); it
    places nothing. Every other position is 0, and turns past column K get nothing.
    Raises ValueError naming the rows with a non-NaN reward at an index k ≥ their turn count.
    Output dtype: that of ``turn_rewards``.
    """
    ends = turn_ends(mask)
    B, K = turn_rewards.shape
    # A NaN column K for the turns past the rewards given: one gather serves every turn.
    padded = torch.cat([turn_rewards, turn_rewards.new_full((B, 1), float("nan"))], dim=1)
    given = ~torch.isnan(padded)
    k = torch.arange(1, K + 2, device=padded.device)
    needed = torch.where(given, k, torch.zeros_like(k)).max(dim=1).values  # turns the rewards need
    bad = needed > ends.sum(dim=1).to(needed.device)
    if bad.any():
        rows = torch.nonzero(bad).flatten().tolist()
        raise ValueError(f"turn_rewards rows {rows} have a reward for a turn their mask does not have")
    turn = (ends.cumsum(dim=1) - 1).clamp(min=0, max=K)  # index of the turn each end closes
    placed = padded.gather(1, turn.to(padded.device))
    keep = ends.to(placed.device) & ~torch.isnan(placed)
    return torch.where(keep, placed, torch.zeros((), dtype=placed.dtype, device=placed.device))


def episode_totals(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, A) per-token rewards -> (B,) their sum over sampled tokens: the episode's score, as a
    critic-free algorithm (GRPO, RLOO) reads it. Observation tokens and padding are never read."""
    return masked_sum(token_rewards, mask, dim=1)


def shape_episode_rewards(turn_token_rewards: torch.Tensor, kl: torch.Tensor, beta: float,
                          mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token rewards of a multi-turn episode: all (B, A).

    ``turn_token_rewards`` holds the rewards already placed on tokens (:func:`place_turn_rewards`);
    kl is the per-token KL estimate. Returns (rewards, non_score_reward) as
    :func:`tether.algos.rewards.shape_rewards` does: non_score_reward = -beta * kl on sampled
    tokens, rewards = non_score_reward + the placed rewards. Both are exactly 0 where the mask is
    0 (observation tokens, padding), whatever ``kl`` or ``turn_token_rewards`` hold there.
    """
    zero = torch.zeros((), dtype=kl.dtype, device=kl.device)
    non_score = torch.where(mask.bool(), -beta * kl, zero)
    return non_score + zero_padding(turn_token_rewards.to(kl.dtype), mask), non_score
