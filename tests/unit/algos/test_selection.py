"""Online DPO's pairs and rejection sampling's winners, on hand-worked scores."""

from __future__ import annotations

import math

import pytest
import torch

from tether.algos.selection import best_of_group, best_worst_pairs, first_true


def test_pairs_are_each_groups_best_and_worst():
    assert best_worst_pairs(torch.tensor([1.0, 3.0, 2.0, -1.0]), 2).tolist() == [-1, 1, 1, -1]
    # Of four, the best (5, the first of the two) and the worst (0): the others are in no pair.
    assert best_worst_pairs(torch.tensor([1.0, 5.0, 5.0, 0.0]), 4).tolist() == [0, 1, 0, -1]


def test_a_group_of_equal_scores_states_no_preference():
    assert best_worst_pairs(torch.tensor([2.0, 2.0, 0.0, 5.0]), 2).tolist() == [0, 0, -1, 1]


def test_a_pair_needs_two_samples():
    with pytest.raises(ValueError, match="at least 2"):
        best_worst_pairs(torch.tensor([1.0, 2.0]), 1)
    with pytest.raises(ValueError, match="groups of 2"):
        best_worst_pairs(torch.tensor([1.0, 2.0, 3.0]), 2)


def test_the_first_maximum_breaks_ties_towards_the_earlier_column():
    x = torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 4.0]])
    assert first_true(x == x.max(dim=1, keepdim=True).values).tolist() == [1, 0, 2]


def test_best_of_group_keeps_the_top_of_each_group():
    scores = torch.tensor([1.0, 5.0, 5.0, 0.0])
    assert best_of_group(scores, 4).tolist() == [False, True, False, False]
    assert best_of_group(scores, 4, keep=2).tolist() == [False, True, True, False]
    assert best_of_group(torch.tensor([0.5, -1.0, 2.0, 2.0]), 2).tolist() == [True, False, True, False]


def test_best_of_group_with_a_floor():
    scores = torch.tensor([0.5, -1.0, 2.0, 2.0])
    assert best_of_group(scores, 2, min_score=1.0).tolist() == [False, False, True, False]
    assert not best_of_group(scores, 2, keep=2, min_score=6.0).any()


def test_keep_must_fit_the_group():
    with pytest.raises(ValueError, match="keep 3"):
        best_of_group(torch.zeros(4), 2, keep=3)


# A NaN score is no score: never chosen, rejected or kept; the choice is among the other rows.
NAN, INF = float("nan"), float("inf")


def test_a_nan_row_is_never_in_a_pair():
    # Group 1: NaN is ignored, best 3 (row 2), worst 1 (row 1). Group 2: the NaN would be anywhere.
    assert best_worst_pairs(torch.tensor([NAN, 1.0, 3.0, 2.0, 1.0, NAN, 0.0, NAN]), 4).tolist() == \
        [0, -1, 1, 0, 1, 0, -1, 0]


@pytest.mark.parametrize("group", [[NAN, NAN], [NAN, 2.0], [2.0, NAN, 2.0], [INF, NAN, INF], [NAN, -INF]])
def test_a_group_without_two_different_scored_rows_makes_no_pair(group):
    scores = torch.tensor(group + [0.0] + [1.0] * (len(group) - 1))  # a second, ordinary group
    sign = best_worst_pairs(scores, len(group)).tolist()
    assert sign[:len(group)] == [0] * len(group)
    assert sign[len(group):] == [-1, 1] + [0] * (len(group) - 2)


def test_infinite_scores_are_ordinary_scores():
    assert best_worst_pairs(torch.tensor([-INF, 1.0, INF, NAN]), 4).tolist() == [-1, 0, 1, 0]
    assert best_of_group(torch.tensor([-INF, 1.0, INF, NAN]), 4, keep=3).tolist() == [True, True, True, False]


def test_a_nan_row_is_never_kept_and_takes_no_place():
    scores = torch.tensor([NAN, 1.0, 3.0, 2.0])
    assert best_of_group(scores, 4).tolist() == [False, False, True, False]
    assert best_of_group(scores, 4, keep=2).tolist() == [False, False, True, True]
    assert best_of_group(scores, 4, keep=4).tolist() == [False, True, True, True]  # three scored rows
    # A NaN ahead of a -inf does not take its place; ties still go to the earlier row.
    assert best_of_group(torch.tensor([NAN, -INF]), 2).tolist() == [False, True]
    assert best_of_group(torch.tensor([NAN, 1.0, 1.0]), 3).tolist() == [False, True, False]
    assert best_of_group(torch.tensor([NAN, NAN, 0.5, 0.2]), 2, keep=2).tolist() == [False, False, True, True]
    assert best_of_group(torch.tensor([NAN, 1.0]), 2, min_score=0.0).tolist() == [False, True]


def test_first_true_is_the_first_set_column_or_the_width():
    flags = torch.tensor([[False, True, True], [False, False, False], [True, False, False]])
    assert first_true(flags).tolist() == [1, 3, 0]


def reference_keep(group: list, keep: int) -> list:
    """Plain Python: the scored rows by score, higher first, earlier first on ties; the first keep."""
    scored = sorted((i for i, x in enumerate(group) if not math.isnan(x)), key=lambda i: (-group[i], i))
    kept = set(scored[:keep])
    return [i in kept for i in range(len(group))]


def test_both_functions_follow_one_rule_on_random_groups():
    """Against a plain-Python reference on small integer scores (many ties), with NaN and ±inf:
    the pair's chosen row is best_of_group's keep=1 winner, and its rejected row is the winner
    of the negated scores."""
    g = torch.Generator().manual_seed(0)
    values = torch.tensor([NAN, -INF, INF, 0.0, 1.0, 2.0, 3.0])
    for k in (2, 3, 5):
        scores = values[torch.randint(len(values), (40 * k,), generator=g)]
        sign = best_worst_pairs(scores, k).reshape(-1, k)
        for keep in range(1, k + 1):
            kept = best_of_group(scores, k, keep=keep).reshape(-1, k)
            for row, group in enumerate(scores.reshape(-1, k).tolist()):
                assert kept[row].tolist() == reference_keep(group, keep)
        best = best_of_group(scores, k).reshape(-1, k)
        worst = best_of_group(-scores, k).reshape(-1, k)
        for row, group in enumerate(scores.reshape(-1, k).tolist()):
            finite = [x for x in group if not math.isnan(x)]
            if len(finite) >= 2 and max(finite) > min(finite):
                assert (sign[row] == 1).tolist() == best[row].tolist()
                assert (sign[row] == -1).tolist() == worst[row].tolist()
            else:
                assert not bool(sign[row].any())
