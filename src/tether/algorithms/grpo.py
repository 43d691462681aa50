"""GRPO (Shao et al. 2024, DeepSeekMath): G responses per prompt, the group's mean reward as the
baseline (scaled by its std, or not: Dr. GRPO), the same advantage at every token, no critic.
The KL to the reference is a loss term with the k3 estimator (the paper's eq. 4) or a
sequence-level penalty in the reward (``kl.placement``); the clipped ratio has separate lower
and upper clip (DAPO's clip-higher); the loss is aggregated per ``policy_loss.aggregation``.
With ``group.advantage=process`` the advantage is per step instead (process supervision, sec.
4.1.3, :func:`tether.algos.process.process_advantages`): an episode's turns are its steps, and so
are a process reward model's (a ``prm`` reward term's rewards at the steps' last tokens)."""

from __future__ import annotations

import torch

from tether.algorithms.clipped import CriticFree
from tether.algos import masked_mean, zero_padding
from tether.algos.group import group_advantages, sequence_kl_penalty
from tether.algos.process import process_advantages
from tether.algos.rewards import last_token_index
from tether.algos.turns import turn_ends
from tether.types import Experience, Rollout


class GRPO(CriticFree):
    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.loss_mask.to(logprobs.device)
        kl, beta = self.kl_in_reward(logprobs, ref_logprobs, kl_coef)
        shaped = sequence_kl_penalty(scores, kl, mask, beta)
        g = self.samples_per_prompt
        if self.cfg.group.advantage == "process":
            # Each turn a step, and each token with a reward of its own (a PRM's step end): its reward
            # there, the (KL-shaped) score added on the last token. A step reward of exactly 0 off a
            # turn's end is indistinguishable from none, and is not counted as a step.
            steps = zero_padding(rollout.token_rewards.to(shaped), mask) if rollout.token_rewards is not None \
                else torch.zeros_like(mask, dtype=shaped.dtype)
            ends = turn_ends(mask) | (steps != 0)
            steps = steps.scatter_add(1, last_token_index(mask)[:, None], shaped[:, None])
            advantages = process_advantages(steps, ends, mask, g, self.cfg.group.scale_by_std)
        else:
            advantages = zero_padding(group_advantages(shaped, g, self.cfg.group.scale_by_std)[:, None], mask)
        stats = {"objective/non_score_reward": float((shaped - scores.float()).mean()),
                 "group/reward_std": float(shaped.reshape(-1, g).std(dim=1).mean()) if g > 1 else 0.0,
                 "ppo/advantages_mean": float(masked_mean(advantages, mask))}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), stats
