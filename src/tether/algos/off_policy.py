"""Off-policy correction: the responses were sampled by the generation engine's distribution μ
(the behaviour policy), which is not quite the trainer's π_old: other kernels and precision
(vLLM in bf16 against an fp32 actor), or older weights. The policy gradient then needs the
per-token importance weight π_old / μ on top of PPO's own ratio π / π_old.

An unbounded weight has unbounded variance, so it is bounded at ``cap`` (``rollout.is_cap``):

- ``tis`` (truncated importance sampling): weight min(π_old / μ, cap) per token;
- ``mis`` (masked importance sampling): weight 1, except 0 where π_old / μ > cap (the token is
  dropped from the gradient rather than down-weighted);
- ``none``: no weight (today's loss).

The weight multiplies each token's clipped surrogate before the loss aggregates tokens; it is a
constant of the update (no gradient flows through it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.group import importance_ratio
from tether.algos.masked import masked_mean

IS_MODES = ("none", "tis", "mis")


def behaviour_ratio(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """(B, A) π_old / μ per token, exp(log π_old − log μ); 1 on padding (whatever is there): the
    token-level importance ratio of π_old against μ."""
    return importance_ratio(old_logprobs, behaviour_logprobs, mask, "token")


def is_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, mode: str,
               cap: float) -> tuple[Tensor, Tensor]:
    """(B, A) per-token importance weights of ``mode`` (:data:`IS_MODES`) and (B, A) bool: the real
    tokens whose ratio exceeded ``cap`` (truncated under ``tis``, dropped under ``mis``; none
    under ``none``, which changes nothing).

    Weights are 1 on padding; no gradient flows through them.
    """
    if mode not in IS_MODES:
        raise ValueError(f"importance-sampling mode {mode!r}: expected one of {', '.join(IS_MODES)}")
    with torch.no_grad():
        ratio = behaviour_ratio(old_logprobs, behaviour_logprobs, mask)
        over = (ratio > cap) & mask.bool()
        if mode == "tis":
            weights = ratio.clamp(max=cap)
        elif mode == "mis":
            weights = torch.where(over, torch.zeros_like(ratio), torch.ones_like(ratio))
        else:
            weights, over = torch.ones_like(ratio), torch.zeros_like(over)
    return weights, over


def is_stats(weights: Tensor, over: Tensor, mask: Tensor) -> dict[str, float]:
    """``rollout/is_weight_mean`` (the weights' mean over real tokens) and ``rollout/is_clipped_frac``
    (the share of real tokens whose ratio exceeded the cap)."""
    return {"rollout/is_weight_mean": float(masked_mean(weights, mask)),
            "rollout/is_clipped_frac": float(masked_mean(over.to(weights.dtype), mask))}
