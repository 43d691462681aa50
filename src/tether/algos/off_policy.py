"""Off-policy correction: the responses were sampled by the generation engine's distribution μ
(the behaviour policy), which is not quite the trainer's π_old: other kernels and precision
(vLLM in bf16 against an fp32 actor), or older weights. The policy gradient then needs the
per-token importance weight ρ = π_old / μ on top of PPO's own ratio π / π_old.

An unbounded weight has unbounded variance, so it is bounded at ``cap`` (``rollout.is_cap``):

- ``tis`` (truncated importance sampling; Yao et al. 2025, "Your Efficient RL Framework
  Secretly Brings You Off-Policy RL Training"): w = min(ρ, cap) per token;
- ``mis`` (masked importance sampling, as Liu et al. 2025, "When Speed Kills Stability", and
  TRL's ``token_mask`` mode define it): w = ρ · 1[ρ ≤ cap]: a token at or under the cap is
  weighted by its ratio, a token above it is dropped from the gradient (w = 0), not truncated;
- ``none``: no weight (w = 1).

A token whose log-ratio log π_old − log μ is not finite (a NaN or ±inf log-prob from the engine,
or a NaN from the actor) has no usable ratio: its weight is 0 under ``tis`` and ``mis`` (it leaves
the gradient, as a masked token does) and it is counted apart from the tokens over the cap
(:func:`nonfinite_tokens`; :func:`is_stats` reports their share as ``rollout/is_nonfinite_frac``
when its caller passes them). Under ``tis`` a NaN would
otherwise pass ``min`` into the loss, and an engine log-prob of −inf (ρ = +inf) would get the
full cap; under ``mis`` neither may count as a kept token.

The weight multiplies each token's clipped surrogate before the loss aggregates tokens; it is a
constant of the update (no gradient flows through it). Padding always weighs 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tether.algos.group import importance_ratio
from tether.algos.masked import masked_mean, zero_padding

IS_MODES = ("none", "tis", "mis")


def behaviour_ratio(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """(B, A) π_old / μ per token, exp(log π_old − log μ); 1 on padding (whatever is there): the
    token-level importance ratio of π_old against μ. NaN where the log-ratio is NaN, +inf where
    it is above ~88.7 (float32's exp overflows) or +inf."""
    return importance_ratio(old_logprobs, behaviour_logprobs, mask, "token")


def nonfinite_tokens(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """(B, A) bool: the real tokens whose log-ratio log π_old − log μ is NaN or ±inf, the ones
    :func:`is_weights` gives weight 0 whatever the mode (padding is never one)."""
    return ~torch.isfinite(old_logprobs.detach().float() - behaviour_logprobs.detach().float()) & mask.bool()


def is_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, mode: str,
               cap: float) -> tuple[Tensor, Tensor]:
    """(B, A) per-token importance weights of ``mode`` (:data:`IS_MODES`) and (B, A) bool: the real
    tokens with a finite log-ratio whose ratio ρ = π_old / μ exceeds ``cap`` (truncated to ``cap``
    under ``tis``, dropped under ``mis``; none under ``none``, which changes nothing).

    - ``tis``: w = min(ρ, cap);
    - ``mis``: w = ρ where ρ ≤ cap, else 0;
    - a non-finite log-ratio (:func:`nonfinite_tokens`) gives w = 0 under both, and is not in
      the returned "over the cap" mask.

    Every weight is finite, in [0, cap]; 1 on padding; no gradient flows through them.
    """
    if mode not in IS_MODES:
        raise ValueError(f"importance-sampling mode {mode!r}: expected one of {', '.join(IS_MODES)}")
    with torch.no_grad():
        ratio = behaviour_ratio(old_logprobs, behaviour_logprobs, mask)
        if mode == "none":
            return torch.ones_like(ratio), torch.zeros_like(mask, dtype=torch.bool)
        bad = nonfinite_tokens(old_logprobs, behaviour_logprobs, mask)
        # NaN > cap is False, so a NaN ratio is never "over"; an inf one from a finite log-ratio
        # past exp's range (> ~88.7) is over, as it should be.
        over = (ratio > cap) & mask.bool() & ~bad
        if mode == "tis":
            weights = ratio.clamp(max=cap)
        else:  # mis: keep the ratio where it is at most the cap, 0 above (and on NaN: not ≤ cap)
            weights = torch.where(over, torch.zeros_like(ratio), ratio)
        weights = torch.where(bad, torch.zeros_like(weights), weights)  # NaN must not reach the loss
    return weights, over


def is_stats(weights: Tensor, over: Tensor, mask: Tensor, nonfinite: Tensor | None = None) -> dict[str, float]:
    """``rollout/is_weight_mean`` (the weights' mean over real tokens), ``rollout/is_clipped_frac``
    (the share of real tokens whose ratio exceeded the cap) and, given ``nonfinite``
    (:func:`nonfinite_tokens`), ``rollout/is_nonfinite_frac`` (the share of real tokens whose
    log-ratio was NaN or inf, weighted 0). All (B, A) over the (B, A) response mask."""
    stats = {"rollout/is_weight_mean": float(masked_mean(weights, mask)),
             "rollout/is_clipped_frac": float(masked_mean(over.to(weights.dtype), mask))}
    if nonfinite is not None:
        stats["rollout/is_nonfinite_frac"] = float(masked_mean(nonfinite.to(weights.dtype), mask))
    return stats


def token_mismatch(trainer_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor) -> float:
    """max |log π_trainer − log μ_engine| over the sampled tokens of (B, A) log-probs: how far the
    trainer's log-probs of the sampled tokens are from the engine's (0.0 when identical).

    Positions with mask 0 (observation tokens, padding) are never read; an all-zero or empty mask
    gives 0.0. A NaN at a sampled token gives NaN (a broken log-prob is reported, not hidden).
    The difference is taken in float64.
    """
    diff = (trainer_logprobs.detach().double() - engine_logprobs.detach().double()).abs()
    kept = zero_padding(diff, mask)
    return float(kept.amax()) if kept.numel() else 0.0


def mismatch_rate(trainer_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor, tolerance: float) -> float:
    """The fraction of sampled tokens (mask 1) of (B, A) log-probs whose trainer and engine log-probs
    differ by more than ``tolerance`` nats (0.0 for an empty mask; a NaN difference counts as a
    mismatch). Float noise between a decode step and a whole-sequence forward stays far below a
    tolerance of 0.1; a token the engine did not sample is typically off by nats."""
    m = mask.bool()
    count = int(m.sum())
    if count == 0:
        return 0.0
    diff = (trainer_logprobs.detach().double() - engine_logprobs.detach().double()).abs()
    return float((~(diff <= tolerance) & m).sum()) / count

