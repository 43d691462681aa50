"""A third-party RL algorithm, as a user would write it outside tether's source: one file, one
class, one registration. Policy gradient with the batch's mean score as the baseline (the same
advantage at every token of a response), the shared clipped actor loss, no critic."""

from tether.algorithms.clipped import CriticFree
from tether.registry.algorithms import AlgorithmSpec, register_algorithm
from tether.types import Experience


class BatchBaseline(CriticFree):
    def experience(self, rollout, logprobs, ref_logprobs, values, scores, kl_coef):
        mask = rollout.response_mask.to(logprobs.device)
        advantages = (scores.float() - scores.float().mean())[:, None] * mask
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), {}


register_algorithm(AlgorithmSpec(
    "batch_baseline", BatchBaseline, "Batch-baseline PG",
    summary="Policy gradient with the batch's mean score as baseline; no critic.",
    purpose="a batch-baseline policy gradient against a reward (a plugin algorithm)",
    needs_critic=False, inert_keys=("rl.gamma", "group.scale_by_std")))
