"""A plugin algorithm with a bug: one advantage per response, (B,), where the update needs one per
response token, (B, A). tether refuses it where the loop calls experience(), naming it."""

from tether.algorithms.clipped import CriticFree
from tether.registry.algorithms import AlgorithmSpec, register_algorithm
from tether.types import Experience


class PerResponseAdvantages(CriticFree):
    def experience(self, rollout, logprobs, ref_logprobs, values, scores, kl_coef):
        advantages = scores.float() - scores.float().mean()  # (B,): the bug
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), {}


register_algorithm(AlgorithmSpec(
    "bad_advantages", PerResponseAdvantages, "Per-response advantages (broken)",
    summary="A plugin whose advantages have the wrong shape.",
    purpose="a broken plugin algorithm (tests)",
    needs_critic=False, inert_keys=("rl.gamma", "group.scale_by_std")))
