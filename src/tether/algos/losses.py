"""Losses for the three stages: SFT, Bradley-Terry reward model, PPO policy/value, entropy."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tether.algos.kl import kl_k2
from tether.algos.masked import masked_mean, zero_padding


def bradley_terry_loss(
    r_chosen: torch.Tensor,
    r_rejected: torch.Tensor,
    margin: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Scalar mean of -log sigmoid(r_chosen - r_rejected - margin); rewards (B,), margin (B,)/float/None."""
    delta = r_chosen - r_rejected
    if margin is not None:
        delta = delta - margin  # margin variant (Touvron et al. 2023, Llama 2, eq. 2)
    # logsigmoid is the stable form of log(sigmoid) (Bradley & Terry 1952; Ouyang et al. 2022 eq. 1).
    return -F.logsigmoid(delta).mean()


def distilled_bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor,
                                 teacher_margin: torch.Tensor) -> torch.Tensor:
    """Scalar mean of the Bradley-Terry cross-entropy against a teacher's soft label: with
    d = r_chosen − r_rejected and p = σ(teacher_margin) (the teacher's probability that chosen wins),
    −[p·log σ(d) + (1 − p)·log σ(−d)]. Reward-model distillation: the student matches the teacher's
    preference probabilities, not only its orderings; the loss is least (the entropy of p) at
    d = teacher_margin. With p = 1 it is :func:`bradley_terry_loss`. All (B,)."""
    delta = r_chosen - r_rejected
    p = torch.sigmoid(teacher_margin.to(delta.dtype))
    return -(p * F.logsigmoid(delta) + (1 - p) * F.logsigmoid(-delta)).mean()


def sft_loss(token_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scalar NLL averaged over response tokens: token_logp (B, T), mask (B, T) 1 on response only."""
    return -masked_mean(token_logp, mask)


def clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> torch.Tensor:
    """Elementwise min(r*A, clip(r, 1-eps, 1+eps)*A) (Schulman et al. 2017, eq. 7); shape of ``ratio``."""
    return torch.min(ratio * advantages, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages)


@dataclass
class PolicyLossOutput:
    """loss: scalar tensor with grad; the rest are python floats (no grad)."""

    loss: torch.Tensor
    clipfrac: float
    approx_kl: float
    ratio_mean: float
    ratio_max: float


@dataclass
class ValueLossOutput:
    """loss: scalar tensor with grad; clipfrac: python float."""

    loss: torch.Tensor
    clipfrac: float


def ppo_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """PPO-clip policy loss, all inputs (B, A); loss = -masked_mean(clipped surrogate).

    ``weights``: (B, A) per-token weights of the surrogate (off-policy correction,
    :func:`tether.algos.off_policy.is_weights`), constants of the loss; None: all 1.

    clipfrac = fraction of masked tokens where the clipped term is strictly smaller than the
    unclipped one, i.e. the min selects it and the token's gradient is zero (A>0 and r>1+eps,
    or A<0 and r<1-eps). approx_kl = masked_mean(0.5 * (logp - old_logp)^2) (Schulman 2020, k2).
    """
    m = mask.bool()
    # Zero the log-ratio on padding so exp() cannot overflow into NaN gradients.
    log_ratio = torch.where(m, logp - old_logp, torch.zeros((), dtype=logp.dtype, device=logp.device))
    ratio = torch.exp(log_ratio)
    surrogate = clipped_surrogate(ratio, advantages, clip_eps)
    if weights is not None:
        surrogate = surrogate * weights.detach()
    loss = -masked_mean(surrogate, mask)
    with torch.no_grad():
        unclipped = ratio * advantages
        clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
        clipfrac = masked_mean((clipped < unclipped).to(ratio.dtype), mask).item()
        approx_kl = masked_mean(kl_k2(logp, old_logp), mask).item()
        ratio_mean = masked_mean(ratio, mask).item()
        ratio_max = ratio[m].max().item() if m.any() else 0.0
    return PolicyLossOutput(loss, clipfrac, approx_kl, ratio_mean, ratio_max)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip_range: float | None,
) -> ValueLossOutput:
    """Clipped value loss 0.5 * masked_mean(max((v-R)^2, (v_clip-R)^2)); inputs (B, A).

    v_clip = old_values + clamp(values - old_values, -c, c) (PPO2 baselines / Ziegler et al. 2019).
    clip_range None -> plain 0.5 * masked_mean((v-R)^2), clipfrac 0.
    clipfrac = fraction of masked tokens where the clip moved v (|v - old| > c) and the clipped
    term is strictly larger. (Without the first condition, rounding in old + (v - old) made
    unclipped tokens count at random.) Padding is zeroed first, so a NaN there reaches neither
    the loss nor the gradient.
    """
    m = mask.bool()
    values, old_values, returns = (zero_padding(x, m) for x in (values, old_values, returns))
    unclipped = (values - returns) ** 2
    if clip_range is None:
        return ValueLossOutput(0.5 * masked_mean(unclipped, mask), 0.0)
    v_clip = old_values + torch.clamp(values - old_values, -clip_range, clip_range)
    clipped = (v_clip - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped, clipped), mask)
    with torch.no_grad():
        binding = ((values - old_values).abs() > clip_range) & (clipped > unclipped)
        clipfrac = masked_mean(binding.to(values.dtype), mask).item()
    return ValueLossOutput(loss, clipfrac)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy in nats over the last dim: (..., V) -> (...).

    H = logsumexp(z) - sum softmax(z) * z (stable: no log of small probabilities);
    -inf logits (banned tokens) contribute 0.
    """
    logz = torch.logsumexp(logits, dim=-1)
    p = torch.softmax(logits, dim=-1)
    finite = torch.where(torch.isneginf(logits), torch.zeros((), dtype=logits.dtype, device=logits.device), logits)
    return logz - (p * finite).sum(dim=-1)
