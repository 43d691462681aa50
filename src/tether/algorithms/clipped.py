"""The actor loss the critic-free algorithms share (GRPO, RLOO, REINFORCE++): the clipped
surrogate with separate lower and upper clip, aggregated over tokens as the algorithm's
paper does it, and optionally β·KL to the reference as a loss term."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tether.algos import kl_estimate, kl_k2
from tether.algos.group import aggregate, aggregation_weight, asymmetric_clipped_surrogate
from tether.types import Experience


@dataclass(frozen=True)
class ClippedPolicyLoss:
    """−aggregate(min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A)) (+ β·aggregate(KL) when
    the KL is a loss term, − entropy_coef × the mean entropy) on a micro-batch of (B, A) tokens.

    ``aggregation`` (:func:`~tether.algos.group.aggregate`) also sets how micro-batches are
    weighted (:meth:`micro_weight`), so accumulation gives the minibatch's loss exactly."""

    clip_low: float
    clip_high: float
    aggregation: str
    max_tokens: int
    entropy_coef: float
    kl_in_loss: bool
    kl_estimator: str
    kl_coef: float

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef > 0

    def micro_weight(self, mb: Experience) -> float:
        return aggregation_weight(mb.rollout.response_mask, self.aggregation)

    def __call__(self, out, mb: Experience) -> tuple[Tensor, dict]:
        logp, mask = out.logprobs, mb.rollout.response_mask
        m = mask.bool()
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        ratio = torch.exp(torch.where(m, logp - mb.logprobs, zero))
        surrogate = asymmetric_clipped_surrogate(ratio, mb.advantages, self.clip_low, self.clip_high)
        policy = aggregate(-surrogate, mask, self.aggregation, self.max_tokens)
        loss = policy
        stats = {}
        if self.kl_in_loss:
            kl = aggregate(kl_estimate(logp, mb.ref_logprobs, self.kl_estimator), mask, self.aggregation,
                           self.max_tokens)
            loss = loss + self.kl_coef * kl
            stats["ppo/policy/kl_loss"] = float(kl.detach())
        if self.entropy_coef > 0:
            loss = loss - self.entropy_coef * aggregate(out.entropy, mask, self.aggregation, self.max_tokens)
        with torch.no_grad():
            r = ratio.detach()
            clipped = torch.clamp(r, 1.0 - self.clip_low, 1.0 + self.clip_high) * mb.advantages

            # Token means under token_mean, else means of per-response means: either way a true mean
            # that adds up exactly over micro-batches (and ranks) weighted as the loss's are.
            how = "token_mean" if self.aggregation == "token_mean" else "sequence_mean"

            def mean(x):
                return float(aggregate(x, mask, how))

            stats.update({
                # Before any update the new and rollout policies are one model: the loop checks ratio = 1.
                "check/ratio_deviation": float(torch.where(m, r - 1, zero).abs().max()),
                "ppo/policy/loss": float(policy.detach()),
                "ppo/policy/clipfrac": mean((clipped < r * mb.advantages).to(r.dtype)),
                "ppo/policy/approxkl": mean(kl_k2(logp.detach(), mb.logprobs)),
                "ppo/policy/ratio_mean": mean(r),
            })
        return loss, stats
