"""Held-out evaluation during RL: fixed prompts, fixed seed, the run's own generation settings.

The evaluator runs through the placement like the loop does: the rollout engine samples, the
actor and the reference give log-probs, the reward source scores.
"""

from __future__ import annotations

from tether.eval.sampling import EvalSamples, evaluate_policy
from tether.rollout import SamplingParams


class HeldOutEvaluator:
    """Samples the actor on ``prompt_ids`` and scores by the reward source, a judge and KL.

    Every call uses the same seed, so two evaluations differ only because the policy did.
    ``score_with_reward`` False: the reward source is not asked (a judge that compares a prompt's
    responses with each other cannot score the one sample per prompt drawn here): no proxy score.
    """

    def __init__(self, prompt_ids, prompts, params: SamplingParams, seed: int, judge=None, rows=None,
                 score_with_reward: bool = True):
        self.rows = rows  # the prompt rows of a run with an environment: one episode each
        self.score_with_reward = score_with_reward
        self.prompt_ids = prompt_ids
        self.prompts = prompts
        self.params = params
        self.seed = seed
        self.judge = judge

    def samples(self, rollout, actor, reference=None, reward=None) -> EvalSamples:
        """``rollout``, ``actor``, ``reference``, ``reward``: the roles (placement proxies or objects)."""
        return evaluate_policy(rollout, actor, self.prompt_ids, self.prompts, self.params, self.seed,
                               reward if self.score_with_reward else None, reference, self.judge, rows=self.rows)

    def __call__(self, rollout, actor, reference=None, reward=None) -> dict:
        """``eval/*`` metrics: proxy and gold score, KL to the reference, length, EOS rate, ..."""
        summary = self.samples(rollout, actor, reference, reward).summary()
        return {f"eval/{k}": v for k, v in summary.items() if k != "n"}
