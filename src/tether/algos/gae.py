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
    """Advantages and returns, all (B, A) (mask right-padded: 1s then 0s).

    delta_t = r_t + gamma * V_{t+1} * m_{t+1} - V_t   (V after the last real token is 0)
    A_t     = delta_t + gamma * lam * A_{t+1}
    returns = A + V. Masked positions of both outputs are 0. Pass detached inputs.
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
        next_value, next_adv = v[:, t], adv
    advantages = torch.stack(cols[::-1], dim=1)
    returns = torch.where(m, advantages + v, zero)
    return advantages, returns
