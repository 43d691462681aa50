"""REINFORCE++ (Hu 2025): PPO's per-token reward (−β·KL at every token, the score at the last)
with returns-to-go in place of a critic's GAE, normalised over the whole batch, and the clipped
ratio; no critic, one or more responses per prompt."""

from __future__ import annotations

from tether.algorithms.grpo import clipped_loss
from tether.algos import kl_estimate, shape_rewards
from tether.algos.group import reinforce_pp_advantages
from tether.types import Experience, Rollout


class ReinforcePP:
    needs_critic = False

    def __init__(self, cfg):
        self.cfg = cfg
        self.samples_per_prompt = cfg.samples_per_prompt

    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.response_mask.to(logprobs.device)
        kl = kl_estimate(logprobs, ref_logprobs, self.cfg.kl.estimator)
        beta = kl_coef if self.cfg.kl.placement == "reward" else 0.0
        rewards, non_score = shape_rewards(scores, kl, beta, mask)
        advantages = reinforce_pp_advantages(rewards, mask, self.cfg.ppo.gamma)
        stats = {"objective/non_score_reward": float(non_score.sum(1).mean())}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, rewards, advantages, advantages), stats

    def actor_loss(self, kl_coef: float):
        return clipped_loss(self.cfg, kl_coef)

    def critic_loss(self):
        return None
