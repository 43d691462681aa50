"""RLOO (Kool et al. 2019; Ahmadian et al. 2024, "Back to Basics"): k responses per prompt, each
one's baseline the mean reward of the other k − 1, the reward KL-shaped at the sequence level
(score − β·Σ_t KL_t, as TRL's RLOOTrainer and the paper define it), the same advantage at every
token, no critic. With ``rl.epochs=1`` the ratio is 1 and the clipped loss is the paper's
REINFORCE gradient; more epochs clip per token as PPO does, or one ratio per response with
``policy_loss.ratio_level`` (TRL's RLOOTrainer clips π(y)/π_old(y): ``sequence_product``)."""

from __future__ import annotations

from tether.algorithms.clipped import CriticFree
from tether.algos import masked_mean, zero_padding
from tether.algos.group import rloo_advantages, sequence_kl_penalty
from tether.types import Experience, Rollout


class RLOO(CriticFree):
    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.loss_mask.to(logprobs.device)
        kl, beta = self.kl_in_reward(logprobs, ref_logprobs, kl_coef)
        shaped = sequence_kl_penalty(scores, kl, mask, beta)
        advantages = zero_padding(rloo_advantages(shaped, self.samples_per_prompt)[:, None], mask)
        stats = {"objective/non_score_reward": float((shaped - scores.float()).mean()),
                 "ppo/advantages_mean": float(masked_mean(advantages, mask))}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), stats
