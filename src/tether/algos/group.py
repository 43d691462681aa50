"""Critic-free advantages and the policy-loss aggregations of GRPO, RLOO and REINFORCE++.

Rows of a batch come in groups: ``group_size`` consecutive responses to one prompt.

- GRPO (Shao et al. 2024, DeepSeekMath, eq. 3 and sec. 4.1.2): the group's mean reward is the
  baseline and its standard deviation the scale, Â_i = (r_i − mean(r)) / (std(r) + eps), the
  same at every token of response i. Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like
  Training") drops the std scaling, which favours groups of near-equal rewards.
- RLOO (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics", eq. 6): the baseline of
  response i is the mean reward of the group's *other* k − 1 responses.
- REINFORCE++ (Hu 2025): per-token rewards (−β·KL at every token, the score at the last),
  returns summed to the end (γ), normalised over the whole batch: no critic, no groups needed.

The clipped ratio is per token (PPO, GRPO) or one per response (:func:`importance_ratio`).
"""

from __future__ import annotations

from typing import Literal

import torch

from tether.algos.gae import gae_advantages
from tether.algos.masked import masked_whiten, zero_padding

Aggregation = Literal["token_mean", "sequence_mean", "fixed_normalizer"]
AGGREGATIONS = ("token_mean", "sequence_mean", "fixed_normalizer")
RatioLevel = Literal["token", "sequence", "sequence_product"]
RATIO_LEVELS = ("token", "sequence", "sequence_product")


def grouped(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B,) -> (B / group_size, group_size): consecutive rows are one prompt's group."""
    if group_size < 1 or x.shape[0] % group_size:
        raise ValueError(f"{x.shape[0]} rows do not split into groups of {group_size}")
    return x.reshape(-1, group_size)


def group_advantages(scores: torch.Tensor, group_size: int, scale_by_std: bool = True,
                     eps: float = 1e-4) -> torch.Tensor:
    """GRPO's advantages: (B,) sequence rewards -> (B,) (r − group mean) / (group std + eps),
    or r − group mean when ``scale_by_std`` is False (Dr. GRPO). The std is the sample one
    (n − 1), as TRL's GRPOTrainer computes it; a group of one has advantage 0."""
    g = grouped(scores.float(), group_size)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale_by_std and group_size > 1:
        centred = centred / (g.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def rloo_advantages(scores: torch.Tensor, k: int) -> torch.Tensor:
    """RLOO's advantages: (B,) sequence rewards -> (B,) r_i − mean_{j≠i} r_j over each group of
    ``k`` (k ≥ 2); equal to k/(k − 1)·(r_i − group mean)."""
    if k < 2:
        raise ValueError(f"RLOO needs at least 2 samples per prompt (group.size), got {k}")
    g = grouped(scores.float(), k)
    others = (g.sum(dim=1, keepdim=True) - g) / (k - 1)
    return (g - others).reshape(-1)


def sequence_kl_penalty(scores: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """A KL-shaped sequence reward: (B,) score − β·Σ_t KL_t over the (B, A) response tokens
    (RLOO as TRL and Ahmadian et al. define it; GRPO with the KL in the reward). Padding is
    never read, so a non-finite KL there cannot reach the reward."""
    return scores.float() - beta * zero_padding(kl.float(), mask).sum(dim=1)


def reinforce_pp_advantages(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++'s advantages: (B, A) per-token rewards -> (B, A) returns-to-go
    G_t = Σ_{s≥t} γ^{s−t} r_s, whitened over every response token of the batch. s runs over
    sampled tokens (mask 1) and γ's power counts them only: mask holes are skipped
    (:func:`gae_advantages`' rule)."""
    returns, _ = gae_advantages(rewards.float(), torch.zeros_like(rewards, dtype=torch.float32), mask, gamma, 1.0)
    return masked_whiten(returns, mask)


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: Aggregation, max_tokens: int | None = None) -> torch.Tensor:
    """One loss from (B, A) per-token losses over the response mask:

    - ``token_mean``: Σ loss / Σ tokens over the batch (DAPO, Yu et al. 2025, eq. 8): every token
      weighs the same, so long responses weigh more;
    - ``sequence_mean``: the mean over responses of each response's token mean (GRPO, Shao et
      al. 2024, eq. 3): every response weighs the same, its tokens 1/|o_i| each;
    - ``fixed_normalizer``: Σ loss / (B · ``max_tokens``) (Dr. GRPO, Liu et al. 2025): a constant
      normaliser, so no length bias from the division.

    Padding is never read (``torch.where``), so NaN or inf there cannot reach the loss.
    """
    m = mask.to(per_token.dtype)
    kept = zero_padding(per_token, mask)
    total = kept.sum()
    if how == "token_mean":
        return total / m.sum().clamp(min=1)
    if how == "sequence_mean":
        return (kept.sum(dim=1) / m.sum(dim=1).clamp(min=1)).mean()
    if how == "fixed_normalizer":
        if not max_tokens:
            raise ValueError("fixed_normalizer needs max_tokens (the response length cap)")
        return total / (per_token.shape[0] * max_tokens)
    raise ValueError(f"unknown aggregation {how!r}; expected one of {AGGREGATIONS}")


def aggregation_weight(mask: torch.Tensor, how: Aggregation) -> float:
    """A micro-batch's share for accumulating ``aggregate`` over micro-batches (and ranks) into
    the minibatch's value: its response tokens for ``token_mean``, its responses otherwise."""
    return float(mask.sum()) if how == "token_mean" else float(mask.shape[0])


#: The largest per-response log-ratio a sequence ratio is taken at: exp(20) ≈ 4.9e8. A sum of
#: token log-ratios passes float32's exp range (~88.7) easily (100 tokens at +0.9 each), and
#: exp's inf then makes the loss −inf or its gradient inf·0 = NaN. See :func:`importance_ratio`.
MAX_SEQUENCE_LOG_RATIO = 20.0


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor,
                     level: RatioLevel = "token") -> torch.Tensor:
    """π/π_old at the response tokens: (B, A) log-probs -> (B, A) ratios, 1 on padding.

    - ``token``: r_t = exp(log π_t − log π_old,t), one ratio per token (PPO, GRPO);
    - ``sequence``: one ratio per response, the geometric mean of its token ratios,
      s = exp(mean_t (log π_t − log π_old,t)) = (π(y)/π_old(y))^(1/|y|) (GSPO, Zheng et al. 2025):
      the length normalisation keeps s near 1 for long responses;
    - ``sequence_product``: one ratio per response, π(y)/π_old(y) = exp(Σ_t (log π_t − log π_old,t)),
      the product of its token ratios (TRL's RLOOTrainer).

    A sequence ratio is repeated at each of its response's tokens, so the clip acts on the whole
    response at once: with one advantage per response and ``sequence_mean`` aggregation the
    loss is GSPO's (or TRL's RLOO's) per-response objective. Padding is never read.

    A sequence ratio's log is clamped above at :data:`MAX_SEQUENCE_LOG_RATIO` (20) before the exp,
    so the ratio, the surrogate and their gradients stay finite for any finite log-ratio (at −1e4
    the ratio is 0, which is finite too). The clamp changes nothing PPO's clip keeps: in
    min(r·A, clip(r, 1 − ε_l, 1 + ε_h)·A) a positive advantage has the clipped constant
    (1 + ε_h)·A, gradient 0, from r = 1 + ε_h on, far below e^20. Only a negative advantage reads
    r above 1 + ε_h; there r·A is held at e^20·A with gradient 0 beyond it, a dual clip at
    c = e^20 (dual-clip PPO, Ye et al. 2020, "Mastering Complex Control in MOBA Games") where
    float32 would give −inf or NaN. Token ratios are not clamped.
    """
    m = mask.bool()
    log_ratio = zero_padding(logp - old_logp, m)
    if level == "token":
        return torch.exp(log_ratio)
    if level not in RATIO_LEVELS:
        raise ValueError(f"unknown ratio level {level!r}; expected one of {RATIO_LEVELS}")
    per_response = log_ratio.sum(dim=1, keepdim=True)
    if level == "sequence":
        per_response = per_response / m.sum(dim=1, keepdim=True).clamp(min=1).to(log_ratio.dtype)
    # A clamp, not a select: its gradient is 0 above the bound, so no inf ever enters backward.
    per_response = per_response.clamp(max=MAX_SEQUENCE_LOG_RATIO)
    one = torch.ones((), dtype=log_ratio.dtype, device=log_ratio.device)
    return torch.where(m, torch.exp(per_response).expand_as(log_ratio), one)


def asymmetric_clipped_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float,
                                 clip_high: float) -> torch.Tensor:
    """Elementwise min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A): PPO's surrogate with DAPO's
    separate lower and upper clip ("clip-higher", Yu et al. 2025, sec. 3.1)."""
    return torch.min(ratio * advantages, torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages)
