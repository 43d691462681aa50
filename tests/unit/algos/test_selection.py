"""Online DPO's pairs and rejection sampling's winners, on hand-worked scores."""

from __future__ import annotations

import pytest
import torch

from tether.algos.selection import best_of_group, best_worst_pairs, first_argmax


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


def test_first_argmax_breaks_ties_towards_the_earlier_column():
    assert first_argmax(torch.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [0.0, -1.0, 4.0]])).tolist() == [1, 0, 2]


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
