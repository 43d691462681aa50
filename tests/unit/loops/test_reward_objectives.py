"""Several objectives in one score (loops/reward_objectives.py) on hand-worked values: a fixed-weight
sum is today's score bit for bit, a normalised term is standardised by its running moments, a cost
term bends the score by its multiplier (Safe RLHF's form) and the multiplier climbs by dual ascent
while the limit is broken, stopping at its cap; the state resumes exactly and a checkpoint of other
objectives is refused."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.reward_terms import combine_terms
from tether.common.errors import ConfigError
from tether.config.reward_terms import RewardTermConfig
from tether.loops.reward_objectives import RewardObjectives

X = torch.tensor([[1.0, 0.0, 1.0], [3.0, 2.0, 0.0]])


def terms(limit=0.25, init=1.0, cap=2.0):
    return [RewardTermConfig(name="a", regex="x"),
            RewardTermConfig(name="b", regex="y", weight=2.0, normalize=True),
            RewardTermConfig(name="c", regex="z", limit=limit, multiplier_lr=0.5, multiplier_max=cap,
                             multiplier_init=init)]


def test_fixed_weights_are_the_plain_sum_bit_for_bit():
    plain = [RewardTermConfig(name="a", regex="x", weight=0.3), RewardTermConfig(name="b", regex="y", weight=-2.0)]
    scores = torch.randn(5, 2)
    score, stats = RewardObjectives(plain)(scores)
    assert torch.equal(score, combine_terms(scores, [0.3, -2.0])) and stats == {}
    assert RewardObjectives([]).plain  # a single source: its one column is the score


def test_normalised_and_constrained_terms_on_hand_worked_values():
    objectives = RewardObjectives(terms())
    score, stats = objectives(X)
    # b's moments after [0, 2]: mean 1, std sqrt(2) (Bessel) -> b = [-1/sqrt2, 1/sqrt2]
    # r = a + 2b = [1 - sqrt2, 3 + sqrt2]; costs c = [1, 0] with lambda 1: (r - c) / 2
    r2 = math.sqrt(2)
    torch.testing.assert_close(score, torch.tensor([(1 - r2 - 1) / 2, (3 + r2) / 2]))
    assert stats["objective/b/mean"] == 1.0 and stats["objective/b/std"] == pytest.approx(r2)
    assert stats["objective/a"] == 2.0 and stats["objective/b"] == pytest.approx(0.0, abs=1e-7)
    assert stats["objective/c"] == 0.5
    # the multiplier used for this batch, and the violation mean(c) - limit = 0.5 - 0.25
    assert stats["constraint/c/multiplier"] == 1.0 and stats["constraint/c/violation"] == 0.25
    assert objectives.multipliers.tolist() == [1.0 + 0.5 * 0.25]  # the next batch's
    _, stats = objectives(X)
    assert stats["constraint/c/multiplier"] == 1.125
    assert stats["objective/b/std"] == pytest.approx(math.sqrt(4 / 3))  # [0, 2, 0, 2]: pop var 1, n/(n-1)


def test_a_met_limit_lowers_the_multiplier_to_zero_and_an_unmeetable_one_stops_at_the_cap(capsys):
    met = RewardObjectives(terms(limit=2.0, init=0.2))  # mean(c) = 0.5 <= 2: lambda 0.2 - 0.5*1.5 -> 0
    met(X)
    assert met.multipliers.tolist() == [0.0]
    score, _ = met(X)  # lambda 0: the score is r
    assert score[1] == pytest.approx(3 + 2 * (2 - 1) / math.sqrt(4 / 3))
    never = RewardObjectives(terms(limit=-5.0, init=0.0, cap=2.0))
    for _ in range(4):
        _, stats = never(X)
    assert never.multipliers.tolist() == [2.0] and stats["constraint/c/violation"] == 5.5
    said = capsys.readouterr().err
    assert said.count("constraint c: its multiplier reached multiplier_max=2") == 1  # said once


def test_the_state_resumes_exactly_and_other_objectives_are_refused():
    whole, first = RewardObjectives(terms()), RewardObjectives(terms())
    whole(X)
    first(X)
    resumed = RewardObjectives(terms())
    resumed.load_state_dict(first.state_dict())
    batch = torch.tensor([[0.5, 7.0, 3.0], [2.0, -1.0, 1.0], [0.0, 0.0, 0.0]])
    a, stats_a = whole(batch)
    b, stats_b = resumed(batch)
    assert torch.equal(a, b) and stats_a == stats_b
    with pytest.raises(ConfigError, match=r"normalised terms \['b'\], 1 constraints\) are not this config's"):
        RewardObjectives(terms()[:2]).load_state_dict(first.state_dict())
