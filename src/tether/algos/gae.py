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
    """Advantages and returns, all (B, A), over the steps where ``mask`` is 1.

    delta_t = r_t + gamma * V_{t'} - V_t   (t' the next step where mask is 1; V after the last is 0)
    A_t     = delta_t + gamma * lam * A_{t'}
    returns = A + V. Masked positions of both outputs are 0. Pass detached inputs.

    A 0 inside a row (a multi-turn episode's observation tokens between two sampled turns) is
    not a step and not an end: it is skipped, so the next turn's first sampled token follows the
    last one of this turn and the score at the episode's last sampled token reaches every turn.
    With a right-padded mask (1s then 0s) nothing is skipped but the padding.
    """
    m = mask.bool()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    r = torch.where(m, rewards.to(values.dtype), zero)
    v = torch.where(m, values, zero)  # V = 0 past the last real token: the episode ends there.
    B, A = v.shape
    next_value = torch.zeros(B, dtype=v.dtype, device=v.device)
    next_adv = torch.zeros(B, dtype=v.dtype, device=v.device)
    cols = []
    for t in reversed(range(A)):
        delta = r[:, t] + gamma * next_value - v[:, t]  # TD residual (Schulman et al. 2016, eq. 10)
        adv = torch.where(m[:, t], delta + gamma * lam * next_adv, zero)
        cols.append(adv)
        # A masked position passes the next step's value and advantage on (selected, never computed).
        next_value = torch.where(m[:, t], v[:, t], next_value)
        next_adv = torch.where(m[:, t], adv, next_adv)
    advantages = torch.stack(cols[::-1], dim=1)
    returns = torch.where(m, advantages + v, zero)
    return advantages, returns
