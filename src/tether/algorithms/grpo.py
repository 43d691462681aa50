"""GRPO (Shao et al. 2024, DeepSeekMath): G responses per prompt, the group's mean reward as the
baseline (scaled by its std, or not: Dr. GRPO), the same advantage at every token, no critic.
The KL to the reference is a loss term with the k3 estimator (the paper's eq. 4) or a
sequence-level penalty in the reward (``kl.placement``); the clipped ratio has separate lower
and upper clip (DAPO's clip-higher); the loss is aggregated per ``policy_loss.aggregation``."""

from __future__ import annotations

from tether.algorithms.clipped import ClippedPolicyLoss
from tether.algos import kl_estimate, masked_mean
from tether.algos.group import group_advantages, sequence_kl_penalty
from tether.types import Experience, Rollout


def clipped_loss(cfg, kl_coef: float) -> ClippedPolicyLoss:
    """The shared actor loss from ``policy_loss.*`` (clips default to ``ppo.clip``)."""
    pl = cfg.policy_loss
    return ClippedPolicyLoss(
        clip_low=pl.clip_low if pl.clip_low is not None else cfg.ppo.clip,
        clip_high=pl.clip_high if pl.clip_high is not None else cfg.ppo.clip,
        aggregation=pl.aggregation, max_tokens=cfg.rollout.max_new_tokens, entropy_coef=cfg.ppo.entropy_coef,
        kl_in_loss=cfg.kl.placement == "loss", kl_estimator=cfg.kl.estimator, kl_coef=kl_coef)


class GRPO:
    needs_critic = False

    def __init__(self, cfg):
        self.cfg = cfg
        self.samples_per_prompt = cfg.samples_per_prompt

    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.response_mask.to(logprobs.device)
        kl = kl_estimate(logprobs, ref_logprobs, self.cfg.kl.estimator)
        beta = kl_coef if self.cfg.kl.placement == "reward" else 0.0
        shaped = sequence_kl_penalty(scores, kl, mask, beta)
        seq_adv = group_advantages(shaped, self.samples_per_prompt, self.cfg.group.scale_by_std)
        advantages = seq_adv[:, None] * mask
        stats = {"objective/non_score_reward": float((shaped - scores.float()).mean()),
                 "group/reward_std": float(shaped.reshape(-1, self.samples_per_prompt).std(dim=1).mean())
                 if self.samples_per_prompt > 1 else 0.0,
                 "ppo/advantages_mean": float(masked_mean(advantages, mask))}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), stats

    def actor_loss(self, kl_coef: float) -> ClippedPolicyLoss:
        return clipped_loss(self.cfg, kl_coef)

    def critic_loss(self):
        return None
