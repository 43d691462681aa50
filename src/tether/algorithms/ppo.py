"""PPO-RLHF (Ziegler et al. 2019; Stiennon et al. 2020; Ouyang et al. 2022).

Per-token reward: −β·KL(π‖π_ref) at every token and the sequence score at the last
(kl.placement=reward; or the KL as a loss term, kl.placement=loss); GAE(γ, λ) advantages,
whitened over the batch; the clipped surrogate for the actor (Schulman et al. 2017, eq. 7)
and the clipped value loss for the critic. docs/implementation_details.md lists each detail
and its source.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tether.algos import (
    explained_variance,
    gae_advantages,
    kl_estimate,
    masked_mean,
    masked_whiten,
    ppo_policy_loss,
    shape_rewards,
    value_loss,
    zero_padding,
)
from tether.types import Experience, Rollout


@dataclass(frozen=True)
class PPOActorLoss:
    """Clipped surrogate (+ entropy bonus, + β·KL when kl.placement=loss) on a micro-batch; with a
    shared-trunk value head, + vf_coef × the clipped value loss (one backward for both)."""

    clip: float
    entropy_coef: float
    kl_in_loss: bool
    kl_estimator: str
    kl_coef: float
    value: "PPOCriticLoss"

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef > 0

    def __call__(self, out, mb: Experience) -> tuple[Tensor, dict]:
        logp, mask = out.logprobs, mb.rollout.loss_mask
        # Before any update the new and rollout policies are the same model: the loop checks
        # that the ratio is 1 on the first minibatch (wrong temperature, positions, dropout).
        deviation = torch.where(mask.bool(), (logp.detach() - mb.logprobs).exp() - 1, torch.zeros_like(logp)).abs()
        pl = ppo_policy_loss(logp, mb.logprobs, mb.advantages, mask, self.clip, mb.is_weights)
        loss = pl.loss
        if self.entropy_coef > 0:
            loss = loss - self.entropy_coef * masked_mean(out.entropy, mask)
        if self.kl_in_loss:
            # Padding zeroed before the estimator: a NaN there would reach the gradient (0·NaN) otherwise.
            m = mask.bool()
            kl = kl_estimate(zero_padding(logp, m), zero_padding(mb.ref_logprobs, m), self.kl_estimator)
            loss = loss + self.kl_coef * masked_mean(kl, mask)
        stats = {"check/ratio_deviation": float(deviation.max()), "ppo/policy/loss": float(pl.loss.detach()),
                 "ppo/policy/clipfrac": pl.clipfrac, "ppo/policy/approxkl": pl.approx_kl,
                 "ppo/policy/ratio_mean": pl.ratio_mean}
        if out.values is not None:
            value, value_stats = self.value(out.values, mb)
            loss = loss + value
            stats.update(value_stats)
        return loss, stats


@dataclass(frozen=True)
class PPOCriticLoss:
    """``vf_coef`` × the clipped value loss of (B, A) ``values`` on a micro-batch."""

    vf_coef: float
    clip: float | None

    def __call__(self, values: Tensor, mb: Experience) -> tuple[Tensor, dict]:
        vl = value_loss(values, mb.values, mb.returns, mb.rollout.loss_mask, self.clip)
        return self.vf_coef * vl.loss, {"ppo/val/loss": float(vl.loss.detach()), "ppo/val/clipfrac": vl.clipfrac}


class PPO:
    """PPO-RLHF with a critic (its registry entry says so); one response per prompt unless
    ``group.size`` says more."""

    def __init__(self, cfg):
        self.rl, self.ppo, self.kl = cfg.rl, cfg.ppo, cfg.kl
        self.samples_per_prompt = cfg.samples_per_prompt

    def experience(self, rollout: Rollout, logprobs: Tensor, ref_logprobs: Tensor, values: Tensor | None,
                   scores: Tensor, kl_coef: float) -> tuple[Experience, dict]:
        p, mask = self.ppo, rollout.loss_mask  # the sampled tokens
        kl = kl_estimate(logprobs, ref_logprobs, self.kl.estimator)
        beta = kl_coef if self.kl.placement == "reward" else 0.0
        rewards, non_score = shape_rewards(scores, kl, beta, mask)
        if rollout.token_rewards is not None:  # an environment's per-turn rewards, on their turns' last tokens
            rewards = rewards + rollout.token_rewards.to(rewards)
        advantages, returns = gae_advantages(rewards, values, mask, self.rl.gamma, p.lam)
        if p.whiten_advantages:
            advantages = masked_whiten(advantages, mask)
        stats = {"objective/non_score_reward": float(non_score.sum(1).mean()),
                 "ppo/returns_mean": float(masked_mean(returns, mask)),
                 "ppo/val/explained_var": explained_variance(values, returns, mask)}
        return Experience(rollout, logprobs, ref_logprobs, values, scores, rewards, advantages, returns), stats

    def actor_loss(self, kl_coef: float) -> PPOActorLoss:
        p = self.rl
        return PPOActorLoss(p.clip, p.entropy_coef, self.kl.placement == "loss", self.kl.estimator, kl_coef,
                            self.critic_loss())

    def critic_loss(self) -> PPOCriticLoss:
        return PPOCriticLoss(self.ppo.vf_coef, self.ppo.value_clip)
