"""The actor loss the critic-free algorithms share (GRPO, RLOO, REINFORCE++): the clipped
surrogate with separate lower and upper clip, aggregated over tokens as the algorithm's
paper does it, and optionally β·KL to the reference as a loss term."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tether.algos import kl_estimate, kl_k2
from tether.algos.group import aggregate, aggregation_weight, asymmetric_clipped_surrogate, importance_ratio
from tether.algos.masked import zero_padding
from tether.types import Experience


@dataclass(frozen=True)
class ClippedPolicyLoss:
    """−aggregate(min(r·A, clip(r, 1 − clip_low, 1 + clip_high)·A)) (+ β·aggregate(KL) when
    the KL is a loss term, − entropy_coef × the mean entropy) on a micro-batch of (B, A) tokens.

    ``aggregation`` (:func:`~tether.algos.group.aggregate`) also sets how micro-batches are
    weighted (:meth:`micro_weight`), so accumulation gives the minibatch's loss exactly.
    ``ratio_level`` (:func:`~tether.algos.group.importance_ratio`): r per token, or one r per
    response (GSPO's geometric mean, or TRL's RLOO's product of the token ratios)."""

    clip_low: float
    clip_high: float
    aggregation: str
    max_tokens: int
    entropy_coef: float
    kl_in_loss: bool
    kl_estimator: str
    kl_coef: float
    ratio_level: str = "token"

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef > 0

    def micro_weight(self, mb: Experience) -> float:
        return aggregation_weight(mb.rollout.loss_mask, self.aggregation)

    def __call__(self, out, mb: Experience) -> tuple[Tensor, dict]:
        logp, mask = out.logprobs, mb.rollout.loss_mask
        m = mask.bool()
        zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
        token_ratio = importance_ratio(logp, mb.logprobs, m)
        ratio = token_ratio if self.ratio_level == "token" else importance_ratio(logp, mb.logprobs, m,
                                                                                self.ratio_level)
        surrogate = asymmetric_clipped_surrogate(ratio, mb.advantages, self.clip_low, self.clip_high)
        if mb.is_weights is not None:  # off-policy correction (rollout.is_correction): constants per token
            surrogate = surrogate * mb.is_weights.detach()
        policy = aggregate(-surrogate, mask, self.aggregation, self.max_tokens)
        loss = policy
        stats = {}
        if self.kl_in_loss:
            # Padding zeroed before the estimator: a NaN there would reach the gradient (0·NaN) otherwise.
            per_token_kl = kl_estimate(zero_padding(logp, m), zero_padding(mb.ref_logprobs, m), self.kl_estimator)
            kl = aggregate(per_token_kl, mask, self.aggregation, self.max_tokens)
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
                "check/ratio_deviation": float(torch.where(m, token_ratio.detach() - 1, zero).abs().max()),
                "ppo/policy/loss": float(policy.detach()),
                "ppo/policy/clipfrac": mean((clipped < r * mb.advantages).to(r.dtype)),
                "ppo/policy/approxkl": mean(kl_k2(logp.detach(), mb.logprobs)),
                "ppo/policy/ratio_mean": mean(r),
            })
        return loss, stats


def rollout_ratio_stats(logp: Tensor, old_logp: Tensor, mask: Tensor, weights: Tensor | None = None) -> dict:
    """How far the policy moved from the one that sampled, for losses without a clipped ratio
    (online DPO, rejection sampling); no gradient. The first-minibatch check's largest
    |π/π_old − 1| over the (B, A) response ``mask`` (``check/``), and the approximate KL
    ½(log π − log π_old)² and the ratio as means weighted by (B, A) ``weights`` (None: the mask).

    The weights must be the ones the loss weighs its micro-batch by (their sum is its
    ``micro_weight``: winners' tokens, or 2 per pair as 1/length on each paired row's tokens), so
    that micro-batches and ranks add up to the minibatch's means."""
    with torch.no_grad():
        m = mask.bool()
        w = zero_padding(mask.to(logp.dtype) if weights is None else weights.to(logp.dtype), m)
        ratio = importance_ratio(logp.detach(), old_logp, m)
        total = w.sum().clamp(min=torch.finfo(w.dtype).tiny)
        return {"check/ratio_deviation": float(torch.where(m, ratio - 1, torch.zeros_like(ratio)).abs().max()),
                "ppo/policy/approxkl": float((zero_padding(kl_k2(logp.detach(), old_logp), m) * w).sum() / total),
                "ppo/policy/ratio_mean": float((zero_padding(ratio, m) * w).sum() / total)}


def clipped_loss(cfg, kl_coef: float) -> ClippedPolicyLoss:
    """The shared actor loss from ``policy_loss.*`` (clips default to ``rl.clip``)."""
    pl = cfg.policy_loss
    return ClippedPolicyLoss(
        clip_low=pl.clip_low if pl.clip_low is not None else cfg.rl.clip,
        clip_high=pl.clip_high if pl.clip_high is not None else cfg.rl.clip,
        aggregation=pl.aggregation, max_tokens=cfg.rollout.max_new_tokens, entropy_coef=cfg.rl.entropy_coef,
        kl_in_loss=cfg.kl.placement == "loss", kl_estimator=cfg.kl.estimator, kl_coef=kl_coef,
        ratio_level=pl.ratio_level)


class CriticFree:
    """What GRPO, RLOO and REINFORCE++ share: no critic, ``group.size`` responses per prompt, the
    clipped actor loss, and the per-token KL with the β that shapes the reward (0 when the KL is
    a loss term instead). A subclass writes :meth:`experience`."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.samples_per_prompt = cfg.samples_per_prompt

    def kl_in_reward(self, logprobs: Tensor, ref_logprobs: Tensor, kl_coef: float) -> tuple[Tensor, float]:
        """(B, A) KL estimates (``kl.estimator``) and the β applied to them in the reward."""
        kl = kl_estimate(logprobs, ref_logprobs, self.cfg.kl.estimator)
        return kl, (kl_coef if self.cfg.kl.placement == "reward" else 0.0)

    def actor_loss(self, kl_coef: float) -> ClippedPolicyLoss:
        return clipped_loss(self.cfg, kl_coef)

    def critic_loss(self):
        return None
