"""REINFORCE++ (Hu 2025): PPO's per-token reward (−β·KL at every token, the score at the last)
with returns-to-go in place of a critic's GAE, normalised over the whole batch, and the clipped
ratio; no critic, one or more responses per prompt."""

from __future__ import annotations

from tether.algorithms.clipped import CriticFree
from tether.algos import shape_rewards
from tether.algos.group import reinforce_pp_advantages
from tether.types import Experience, Rollout


class ReinforcePP(CriticFree):
    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.loss_mask.to(logprobs.device)
        kl, beta = self.kl_in_reward(logprobs, ref_logprobs, kl_coef)
        rewards, non_score = shape_rewards(scores, kl, beta, mask)
        advantages = reinforce_pp_advantages(rewards, mask, self.cfg.rl.gamma)
        stats = {"objective/non_score_reward": float(non_score.sum(1).mean())}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, rewards, advantages, advantages), stats
