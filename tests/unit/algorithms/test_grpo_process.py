"""GRPO's process supervision (group.advantage=process): an episode's turns are its steps, each
with its reward on its last token and the score added on the last one, normalised over the group
(tether.algos.process); outcome supervision is unchanged, and the key is refused where it would
do nothing."""

from __future__ import annotations

import pytest
import torch

from tether.algorithms.grpo import GRPO
from tether.algos.process import process_advantages
from tether.common.errors import ConfigError
from tether.config import RLConfig, load_config
from tether.loops.rl_setup import reads_dense_rewards
from tether.types import Rollout

# Two groups of two episodes. Row 0: turn (0-1), observation (2), turn (3-4); row 1: one turn (0-2),
# then padding; rows 2-3 one turn each of the full width.
ACTION = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
RESPONSE = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]])
TURN_REWARDS = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0],
                             [0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
SCORES = torch.tensor([1.0, -1.0, 2.0, 0.0])
EPISODES = ["environment.kind=scripted", "environment.max_turns=3"]


def cfg(*extra):
    return load_config(RLConfig, None, ["model.name_or_path=m", "prompts=p", "reward.models=[r]", "algorithm=grpo",
                                         "group.size=2", "kl.placement=loss", *extra])


def rollout() -> Rollout:
    ids = torch.ones(4, 5, dtype=torch.long)
    return Rollout(torch.ones(4, 2, dtype=torch.long), torch.ones(4, 2, dtype=torch.long), ids, RESPONSE,
                   torch.ones(4, dtype=torch.bool), ["p", "p", "q", "q"], ["a", "b", "c", "d"],
                   action_mask=ACTION, token_rewards=TURN_REWARDS)


def test_process_advantages_of_episodes_hand_worked():
    logp = torch.zeros(4, 5)
    exp, _ = GRPO(cfg(*EPISODES, "group.advantage=process", "group.scale_by_std=false")).experience(
        rollout(), logp, logp, None, SCORES, kl_coef=0.0)
    # Group 1 steps: row 0 turn 1 (0.5), row 0 turn 2 (score 1.0), row 1 (score -1.0): mean 1/6.
    # Row 0: tokens 0-1 get (0.5 - 1/6) + (1.0 - 1/6), tokens 3-4 (1.0 - 1/6); row 1: -1 - 1/6.
    # Group 2: one step each, 2.0 and 0.0: mean 1, advantages +1 and -1 everywhere.
    a, b = 0.5 - 1 / 6, 1.0 - 1 / 6
    expected = torch.tensor([[a + b, a + b, 0.0, b, b], [-7 / 6] * 3 + [0.0, 0.0], [1.0] * 5, [-1.0] * 5])
    assert torch.allclose(exp.advantages, expected, atol=1e-6)
    scaled, _ = GRPO(cfg(*EPISODES, "group.advantage=process")).experience(rollout(), logp, logp, None, SCORES, 0.0)
    ends = torch.tensor([[0, 1, 0, 0, 1], [0, 0, 1, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 1]]).bool()
    steps = TURN_REWARDS + ends * torch.tensor([[1.0], [-1.0], [2.0], [0.0]]) * torch.tensor([0, 0, 0, 0, 1.0]) \
        + torch.tensor([[0.0] * 5, [0, 0, -1.0, 0, 0], [0.0] * 5, [0.0] * 5])
    assert torch.allclose(scaled.advantages, process_advantages(steps, ends, ACTION, 2), atol=1e-6)


def test_outcome_supervision_adds_the_episode_total_and_process_reads_the_turns_where_they_fall():
    assert not reads_dense_rewards(cfg(*EPISODES)) and reads_dense_rewards(cfg(*EPISODES, "group.advantage=process"))
    logp = torch.zeros(4, 5)
    totals = SCORES + TURN_REWARDS.sum(1)  # what the loop hands outcome supervision
    outcome, _ = GRPO(cfg(*EPISODES)).experience(rollout(), logp, logp, None, totals, 0.0)
    # Group 1's totals 1.5 and -1.0: centred +-1.25, sample std 1.25 * sqrt(2): +-0.7071 on every sampled token.
    row = 1.25 / (1.25 * 2 ** 0.5 + 1e-4)
    assert torch.allclose(outcome.advantages[:2], torch.tensor([[row, row, 0.0, row, row], [-row] * 3 + [0.0] * 2]))


@pytest.mark.parametrize("extra, needle", [
    ([], "there is neither"),
    (["algorithm=rloo", *EPISODES], "'group.advantage' = process is set with algorithm=rloo, which does not read"),
])
def test_process_supervision_is_refused_where_it_would_do_nothing(extra, needle):
    with pytest.raises(ConfigError, match=needle):
        cfg("group.advantage=process", *extra)
