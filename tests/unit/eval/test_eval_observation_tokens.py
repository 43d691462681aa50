"""Held-out evaluation of multi-turn episodes: the KL to the reference and the entropy are over the
tokens the policy sampled (``Rollout.loss_mask``); a response's length is every response token."""

from __future__ import annotations

import pytest
import torch

from tether.eval.sampling import evaluate_policy
from tether.rollout import SamplingParams
from tether.types import Rollout

RESPONSE = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
ACTION = torch.tensor([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 0, 0]])
LOGP = torch.tensor([[-1.0, -2.0, -3.0, -0.5, -1.5, -2.5], [-0.7, -4.0, -1.2, -2.2, -3.0, -3.0]])
REF = LOGP - torch.tensor([[0.1, -0.2, 6.0, 8.0, 0.3, 0.2], [0.4, 9.0, -0.1, 7.0, 0.0, 0.0]])
ENTROPY = torch.tensor([[1.0, 2.0, 50.0, 60.0, 3.0, 4.0], [5.0, 70.0, 6.0, 80.0, 0.0, 0.0]])


class Engine:
    def __init__(self, action_mask):
        self.action_mask = action_mask

    def generate(self, prompt_ids, prompts, params, seed=0, chunk_size=None):
        ids = torch.ones(2, 6, dtype=torch.long)
        return Rollout(ids, torch.ones(2, 6, dtype=torch.long), ids, RESPONSE, torch.tensor([True, True]),
                       list(prompts), ["a", "b"], action_mask=self.action_mask)


class Policy:
    def __init__(self, logp, entropy=None):
        self.logp, self.entropy = logp, entropy

    def logprobs(self, rollout, with_entropy=False, use_captured=False):
        return self.logp, self.entropy if with_entropy else None


@pytest.mark.parametrize("action_mask", [ACTION, None], ids=["episode", "single_turn"])
def test_kl_and_entropy_over_sampled_tokens_lengths_over_all(action_mask):
    samples = evaluate_policy(Engine(action_mask), Policy(LOGP, ENTROPY), [[1], [2]], ["p", "q"],
                              SamplingParams(max_new_tokens=6), reference=Policy(REF))
    mask = RESPONSE if action_mask is None else ACTION
    assert samples.kl == pytest.approx(((LOGP - REF) * mask).sum(1).tolist())
    assert samples.entropy == pytest.approx(((ENTROPY * mask).sum(1) / mask.sum(1)).tolist())
    assert samples.lengths == [6, 4]
