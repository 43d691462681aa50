"""An environment's per-turn rewards reach every algorithm: the episode total on the score of one
that takes one score per episode, left per token for one that reads them where they fall (PPO)."""

from __future__ import annotations

import torch

from tether.loops.rl_setup import with_episode_rewards
from tether.registry.algorithms import ALGORITHMS
from tether.types import Rollout


def rollout(token_rewards=None, action_mask=None) -> Rollout:
    B, A = 2, 5
    return Rollout(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2, dtype=torch.long),
                   response_ids=torch.ones(B, A, dtype=torch.long), response_mask=torch.ones(B, A, dtype=torch.long),
                   ended=torch.ones(B, dtype=torch.bool), prompts=["a", "b"], responses=["x", "y"],
                   action_mask=action_mask, token_rewards=token_rewards)


def test_without_per_turn_rewards_the_score_is_the_same_tensor():
    score = torch.tensor([0.5, -1.0])
    assert with_episode_rewards(score, rollout(), dense=False) is score


def test_a_per_episode_algorithm_gets_the_total_of_the_sampled_turns():
    # turn 1 = tokens 0-1 (reward 0.25 on token 1), observation 2, turn 2 = tokens 3-4 (reward 1.0 on 4)
    action = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 0, 0, 0]])
    rewards = torch.tensor([[0.0, 0.25, 0.0, 0.0, 1.0], [-0.5, 0.0, 0.0, 0.0, 0.0]])
    score = torch.tensor([0.5, -1.0])
    out = with_episode_rewards(score, rollout(rewards, action), dense=False)
    assert torch.equal(out, torch.tensor([1.75, -1.5]))
    assert with_episode_rewards(score, rollout(rewards, action), dense=True) is score


def test_only_ppo_reads_per_token_rewards_among_the_built_ins():
    assert {name for name, spec in ALGORITHMS.items() if spec.dense_rewards} == {"ppo"}


def test_masking_truncated_episodes_zeroes_their_rows_of_the_action_mask_only():
    from tether.environments.base import EpisodeStats
    from tether.loops.rl_setup import without_truncated
    from tether.rollout.episodes import EpisodeRecord
    from tether.types import Experience

    action = torch.tensor([[1, 1, 0, 1, 1], [1, 0, 0, 1, 0]])
    ro = rollout(action_mask=action)
    ro.episodes = [EpisodeRecord(EpisodeStats(turns=2), []), EpisodeRecord(EpisodeStats(turns=2, truncated=True), [])]
    full = torch.ones(2, 5)
    exp = Experience(ro, full, full, None, torch.tensor([1.0, -1.5]), full, full, full)
    masked = without_truncated(exp)
    assert masked.rollout.loss_mask.tolist() == [[1, 1, 0, 1, 1], [0, 0, 0, 0, 0]]
    assert masked.rollout.response_mask.tolist() == ro.response_mask.tolist()  # still context, still counted
    assert masked.scores.tolist() == [1.0, -1.5] and exp.rollout.loss_mask.tolist() == action.tolist()
