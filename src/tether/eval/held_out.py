"""Held-out evaluation during PPO: fixed prompts, fixed seed, the run's own generation settings."""

from __future__ import annotations

from tether.eval.sampling import EvalSamples, evaluate_policy
from tether.rollout import SamplingParams


class HeldOutEvaluator:
    """Samples the actor on ``prompt_ids`` and scores by the reward source, a judge and KL.

    Every call uses the same seed, so two evaluations differ only because the policy did.
    """

    def __init__(self, prompt_ids, prompts, params: SamplingParams, seed: int, reward=None, judge=None):
        self.prompt_ids = prompt_ids
        self.prompts = prompts
        self.params = params
        self.seed = seed
        self.reward = reward
        self.judge = judge

    def samples(self, model, tokenizer, reference=None) -> EvalSamples:
        was_training = model.training
        out = evaluate_policy(model, tokenizer, self.prompt_ids, self.prompts, self.params, self.seed,
                              self.reward, reference, self.judge)
        model.train(was_training)
        return out

    def __call__(self, model, tokenizer, reference=None) -> dict:
        """``eval/*`` metrics: proxy and gold score, KL to the reference, length, EOS rate, ..."""
        summary = self.samples(model, tokenizer, reference).summary()
        return {f"eval/{k}": v for k, v in summary.items() if k != "n"}
