"""Dense rewards that are zero except at each response's last sampled token are today's outcome
rewards, bit for bit: PPO's per-token rewards, advantages and returns are equal whether the score
arrives as the (B,) score or as a (B, A) token reward on the last sampled token."""

from __future__ import annotations

import torch

from tether.algorithms.ppo import PPO
from tether.algos.rewards import last_token_index
from tether.config import RLConfig, load_config
from tether.types import Rollout


def test_a_score_on_the_last_token_as_a_dense_reward_is_the_outcome_reward_bit_for_bit():
    torch.manual_seed(0)
    B, A = 4, 7
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3, [1, 1, 0, 0, 1, 1, 0], [1] + [0] * 6])
    ids = torch.ones(B, A, dtype=torch.long)
    logp, ref, values = torch.randn(B, A) - 2, torch.randn(B, A) - 2, torch.randn(B, A)
    scores = torch.randn(B)
    cfg = load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "kl.coef=0.07"])

    def experience(score, token_rewards):
        ro = Rollout(torch.ones(B, 2, dtype=torch.long), torch.ones(B, 2, dtype=torch.long), ids,
                     (mask.cumsum(1) > 0).long() * (torch.arange(A) <= last_token_index(mask)[:, None]).long(),
                     torch.ones(B, dtype=torch.bool), list("abcd"), list("wxyz"), action_mask=mask,
                     token_rewards=token_rewards)
        exp, _ = PPO(cfg).experience(ro, logp, ref, values, score, kl_coef=0.07)
        return exp

    outcome = experience(scores, None)
    dense = experience(torch.zeros(B), torch.zeros(B, A).scatter(1, last_token_index(mask)[:, None], scores[:, None]))
    for field in ("rewards", "advantages", "returns"):
        assert torch.equal(getattr(outcome, field), getattr(dense, field)), field
