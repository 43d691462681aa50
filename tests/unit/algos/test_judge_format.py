"""A judge's rubric filled and its answers read: hand-worked cases of every rule."""

from __future__ import annotations

import pytest

from tether.algos.judge_format import (
    ScoreFormat,
    fill,
    pairwise_outcome,
    parse_preference,
    parse_score,
    to_unit,
)


def test_the_rubric_is_filled_by_plain_replacement():
    rubric = "Rate this answer to {prompt}:\n{response}\nEnd with Score: N."
    assert fill(rubric, prompt="what is {x}?", response="a {b} c") == "Rate this answer to what is {x}?:\na {b} c\nEnd with Score: N."
    with pytest.raises(ValueError, match="{response}"):
        fill("no placeholder for it: {prompt}", prompt="p", response="r")


@pytest.mark.parametrize("text, expected", [
    ("Score: 7", 7.0),
    ("The answer is fine.\nscore = 7.5", 7.5),
    ("Score: **9**", 9.0),
    ("First I thought Score: 2, but on reflection Score: 8", 8.0),  # the last verdict counts
    ("Score: 11", None),  # outside [1, 10]
    ("Score: 0", None),
    ("no verdict at all", None),
    ("", None),
    (None, None),
])
def test_a_score_is_the_last_match_within_the_scale(text, expected):
    assert parse_score(text) == expected


def test_a_declared_format_and_scale():
    fmt = ScoreFormat(pattern=r"<rating>(-?\d+)</rating>", low=-2, high=2)
    assert parse_score("<rating>-2</rating>", fmt) == -2.0
    assert parse_score("<rating>3</rating>", fmt) is None
    assert to_unit(-2, fmt) == 0.0 and to_unit(1, fmt) == 0.75 and to_unit(2, fmt) == 1.0
    with pytest.raises(ValueError, match="no group"):
        ScoreFormat(pattern=r"score")
    with pytest.raises(ValueError, match="low < high"):
        ScoreFormat(low=5, high=5)


@pytest.mark.parametrize("text, expected", [
    ("Winner: A", "A"), ("winner = [[b]]", "B"), ("Winner: tie", "tie"), ("Winner: B ... no, Winner: A", "A"),
    ("Winner: C", None), ("both are good", None), (None, None),
])
def test_a_preference_is_a_b_or_tie(text, expected):
    assert parse_preference(text) == expected


@pytest.mark.parametrize("first, swapped, expected", [
    ("A", "B", (1.0, False)),   # x first as A, then as B: x both times
    ("B", "A", (0.0, False)),   # y both times
    ("A", "A", (0.5, True)),    # the first position both times: position bias
    ("B", "B", (0.5, True)),
    ("tie", "tie", (0.5, False)),
    ("A", "tie", (0.75, False)),
    ("tie", "A", (0.25, False)),
    (None, "A", (None, False)),
])
def test_both_orders_cancel_position_bias(first, swapped, expected):
    assert pairwise_outcome(first, swapped) == expected


def test_win_rates_average_each_responses_outcomes_and_leave_failures_out():
    from tether.algos.judge_format import win_rates

    # 0 beats 1 (1.0), 0 ties 2 (0.5), 1 vs 2 failed
    assert win_rates({(0, 1): 1.0, (0, 2): 0.5, (1, 2): None}, 3) == [0.75, 0.0, 0.5]
    assert win_rates({(0, 1): None}, 2) == [None, None]
    assert win_rates({(0, 1): 0.25, (0, 2): 0.0, (1, 2): 1.0}, 3) == [0.125, 0.875, 0.5]


def test_parse_ranking_needs_every_number_once_and_reads_the_last():
    from tether.algos.judge_format import parse_ranking

    assert parse_ranking("Ranking: 2 > 3 > 1", 3) == [1, 2, 0]
    assert parse_ranking("first Ranking: 1 > 2 > 3, then on reflection\nRanking: [3] > [1] > [2]", 3) == [2, 0, 1]
    assert parse_ranking("ranking = 2, 1", 2) == [1, 0]
    for bad in ("Ranking: 2 > 2 > 1", "Ranking: 1 > 2", "Ranking: 1 > 2 > 4", "no ranking", None, ""):
        assert parse_ranking(bad, 3) is None, bad


def test_rank_scores_and_discordance_on_hand_worked_rankings():
    from tether.algos.judge_format import discordance, numbered, rank_scores

    assert rank_scores([1, 2, 0]) == [0.0, 1.0, 0.5]
    assert rank_scores([0, 1]) == [1.0, 0.0]
    assert discordance([0, 1, 2], [0, 1, 2]) == 0.0
    assert discordance([0, 1, 2], [2, 1, 0]) == 1.0
    assert discordance([0, 1, 2], [1, 0, 2]) == pytest.approx(1 / 3)  # only (0, 1) flips
    assert numbered(["a", "b"]) == "[1] a\n\n[2] b"
    with pytest.raises(ValueError):
        rank_scores([0])


def test_a_preference_group_may_read_one_or_two():
    from tether.algos.judge_format import parse_preference

    assert parse_preference("answer 2", r"answer (1|2)") == "B"
    assert parse_preference("answer 1 . answer 1", r"answer (1|2)") == "A"
    assert parse_preference("answer 3", r"answer (\d)") is None
