"""Per-token shaped reward: -beta*KL at every response token, RM score added at the last one.

Ziegler et al. 2019 sec. 2.2; Ouyang et al. 2022 eq. 2.
"""

from __future__ import annotations

import torch


def last_token_index(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last position with mask == 1 in each row: (B, A) -> (B,) long.

    Works for any mask (not only right-padded ones). Raises ValueError if a row has no 1.
    """
    m = mask.bool()
    pos = torch.arange(m.shape[-1], device=m.device).expand_as(m)
    idx = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=-1).values
    if (idx < 0).any():
        rows = torch.nonzero(idx < 0).flatten().tolist()
        raise ValueError(f"mask rows {rows} have no 1 (empty response)")
    return idx


def shape_rewards(
    score: torch.Tensor, kl: torch.Tensor, beta: float, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Build per-token rewards.

    score (B,) RM score per sequence; kl (B, A) per-token KL estimate; mask (B, A) the tokens
    the policy sampled (a rollout's ``loss_mask``: a multi-turn episode's observation tokens are 0).
    Returns (rewards, non_score_reward), both (B, A):
    non_score_reward = -beta * kl on masked tokens, rewards = non_score_reward with ``score``
    added at ``last_token_index`` (the last sampled token, never a trailing observation).
    Positions where the mask is 0 are exactly 0 in both.
    """
    zero = torch.zeros((), dtype=kl.dtype, device=kl.device)
    non_score = torch.where(mask.bool(), -beta * kl, zero)
    last = last_token_index(mask)
    # Score only on the final sampled token (Ziegler et al. 2019 sec. 2.2).
    bonus = torch.zeros_like(non_score).scatter(1, last[:, None], score.to(kl.dtype)[:, None])
    return non_score + bonus, non_score
