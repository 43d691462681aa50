"""A composed reward's maths on hand-worked values (algos/reward_terms.py)."""

from __future__ import annotations

import pytest
import torch

from tether.algos.reward_terms import combine_terms, length_penalty, term_means

# B = 3 responses, T = 2 terms: an answer check (0/1) and a length penalty.
SCORES = torch.tensor([[1.0, -0.2],
                       [0.0, 0.0],
                       [1.0, -0.5]])


def test_combine_is_the_weighted_sum_per_response():
    # 1*1 + 0.5*(-0.2) = 0.9;  0 + 0 = 0;  1 + 0.5*(-0.5) = 0.75
    torch.testing.assert_close(combine_terms(SCORES, [1.0, 0.5]), torch.tensor([0.9, 0.0, 0.75]))
    # a weight of 0 leaves its term out; negative weights subtract
    torch.testing.assert_close(combine_terms(SCORES, [0.0, -2.0]), torch.tensor([0.4, 0.0, 1.0]))


def test_combine_refuses_a_weight_count_that_does_not_match():
    with pytest.raises(ValueError, match=r"\(B, 3\)"):
        combine_terms(SCORES, [1.0, 1.0, 1.0])


def test_term_means_are_the_unweighted_batch_means():
    means = term_means(SCORES, ["answer", "length"])
    assert list(means) == ["reward/answer", "reward/length"]
    assert means["reward/answer"] == pytest.approx(2 / 3)
    assert means["reward/length"] == pytest.approx(-0.7 / 3)


def test_length_penalty_counts_tokens_past_the_target():
    lengths = torch.tensor([3, 8, 9, 20])
    # coef 0.1, target 8: 0, 0, -0.1 * 1, -0.1 * 12
    torch.testing.assert_close(length_penalty(lengths, 0.1, 8), torch.tensor([0.0, 0.0, -0.1, -1.2]))
    # target 0: every token pays
    torch.testing.assert_close(length_penalty(lengths, 0.5, 0), torch.tensor([-1.5, -4.0, -4.5, -10.0]))
