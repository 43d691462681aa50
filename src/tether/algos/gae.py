"""Generalized Advantage Estimation (Schulman et al. 2016, eq. 16) over response tokens."""

from __future__ import annotations

import torch


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, all (B, A), over the sampled tokens of ``mask`` (B, A).

    The recursion runs over the positions where the mask is 1, in order; positions with mask 0
    are skipped, not steps:

    delta_t = r_t + gamma * V_{t'} - V_t   (t' the next position with mask 1; V there is 0 if none)
    A_t     = delta_t + gamma * lam * A_{t'}
    returns = A + V.

    So a hole in the mask inside a row (observation tokens an environment inserted between two
    turns of a multi-turn episode: context, not decisions) carries V and A of the next sampled
    token across it unchanged: one gamma step per sampled token, none for the observation.
    Trailing padding (mask 1s then 0s) is the usual case: the episode ends at the last 1. Rewards
    and values at mask-0 positions are never read; both outputs are 0 there. Pass detached inputs.
    """
    m = mask.bool()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    r = torch.where(m, rewards.to(values.dtype), zero)
    v = torch.where(m, values, zero)
    B, A = v.shape
    # V and A at the next sampled token; 0 past the last one: the episode ends there.
    next_value = torch.zeros(B, dtype=v.dtype, device=v.device)
    next_adv = torch.zeros(B, dtype=v.dtype, device=v.device)
    cols = []
    for t in reversed(range(A)):
        delta = r[:, t] + gamma * next_value - v[:, t]  # TD residual (Schulman et al. 2016, eq. 10)
        adv = torch.where(m[:, t], delta + gamma * lam * next_adv, zero)
        cols.append(adv)
        # A mask-0 position is no step: the next sampled token's V and A pass across it.
        next_value = torch.where(m[:, t], v[:, t], next_value)
        next_adv = torch.where(m[:, t], adv, next_adv)
    advantages = torch.stack(cols[::-1], dim=1)
    returns = torch.where(m, advantages + v, zero)
    return advantages, returns
