"""Micro-batches by token budget: first-fit decreasing on hand-worked lengths."""

import random

import pytest

from tether.loops.micro_batches import rows_by_token_budget, token_budget_bins


def cost(lengths, members, padded):
    rows = [lengths[i] for i in members]
    return len(rows) * max(rows) if padded else sum(rows)


def test_padding_free_bins_fill_the_budget_by_summed_lengths():
    # Longest first: 7 opens [1]; 5 does not fit (12) and opens [3]; 4 joins [3] (9);
    # 3 joins [1] (10); 2 fits nowhere (12, 11) and opens [2].
    assert token_budget_bins([3, 7, 2, 5, 4], 10, padded=False) == [[0, 1], [3, 4], [2]]


def test_padded_bins_count_rows_times_the_longest_row():
    # 7 opens [1]; 5 would cost 2x7 and opens [3]; 4 joins [3] (2x5 = 10); 3 would cost 2x7 or
    # 3x5 and opens [0]; 2 joins [0] (2x3 = 6).
    assert token_budget_bins([3, 7, 2, 5, 4], 10, padded=True) == [[1], [3, 4], [0, 2]]


def test_equal_lengths_go_in_index_order():
    assert token_budget_bins([2, 2, 2, 2], 4, padded=False) == [[0, 1], [2, 3]]
    assert token_budget_bins([2, 2, 2, 2], 5, padded=True) == [[0, 1], [2, 3]]
    assert token_budget_bins([2, 2, 2, 2], 6, padded=True) == [[0, 1, 2], [3]]


def test_a_row_longer_than_the_budget_is_a_micro_batch_of_its_own():
    # 12 opens [0] and nothing joins it; 4 opens [2]; 3 joins it (7).
    assert token_budget_bins([12, 3, 4], 10, padded=False) == [[0], [1, 2]]
    assert token_budget_bins([12, 3, 4], 10, padded=True) == [[0], [1, 2]]


def test_a_budget_above_the_batch_gives_one_micro_batch():
    assert token_budget_bins([5, 1, 3], 100, padded=True) == [[0, 1, 2]]


def test_no_rows_no_micro_batches():
    assert token_budget_bins([], 8, padded=False) == []


def test_a_budget_below_one_token_is_refused():
    with pytest.raises(ValueError, match="token budget 0"):
        token_budget_bins([1], 0, padded=False)


@pytest.mark.parametrize("padded", [False, True])
def test_every_row_once_and_every_shared_micro_batch_within_the_budget(padded):
    rng = random.Random(0)
    for _ in range(50):
        lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
        budget = rng.randint(1, 80)
        bins = token_budget_bins(lengths, budget, padded)
        assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
        for members in bins:
            assert members == sorted(members)
            assert len(members) == 1 or cost(lengths, members, padded) <= budget
        assert bins == token_budget_bins(lengths, budget, padded)


def test_a_batch_of_row_ids_is_binned_by_its_rows_tokens():
    tokens = {10: 3, 11: 7, 12: 2, 13: 5, 14: 4}  # test_padding_free_bins... with ids 10..14
    assert rows_by_token_budget([10, 11, 12, 13, 14], tokens.get, 10, padded=False) == [[10, 11], [13, 14], [12]]


def test_an_rl_minibatch_is_split_into_index_tensors_by_its_rows_tokens():
    import torch

    from tether.loops.micro_batches import split_by_token_budget

    tokens = [3, 7, 2, 5, 4]  # experience rows 0..4; the minibatch holds rows 4, 1, 0, 3
    bins = split_by_token_budget(torch.tensor([4, 1, 0, 3]), tokens, 10, padded=False)
    # Lengths in minibatch order [4, 7, 3, 5]: row 1 (7) opens a bin, row 3 (5) another; row 4 (4)
    # joins row 3's (9), row 0 (3) row 1's (10); each bin's rows in minibatch order.
    assert [b.tolist() for b in bins] == [[1, 0], [4, 3]]
    assert all(b.dtype == torch.long for b in bins)
