"""KTO's logged reward means: each micro-batch's share adds up to the batch's mean by label, and
held-out pairs are ranked by the rows split from them."""

from __future__ import annotations

import pytest
import torch

from tether.data import TokenizedUnpaired
from tether.objectives.kto import pair_accuracy, reward_means


def test_micro_batch_shares_add_up_to_the_batch_means():
    rewards = torch.tensor([1.0, 2.0, -1.0, 3.0, -3.0])
    desirable = torch.tensor([True, True, False, True, False])
    whole = reward_means(rewards, desirable, 3, 2)
    # desirable: (1 + 2 + 3) / 3 = 2; undesirable: (-1 - 3) / 2 = -2; margin 4.
    assert whole == {"train/desirable_reward": 2.0, "train/undesirable_reward": -2.0, "train/margin": 4.0}
    # Micro-batches of 2, 2, 1 rows, each weighted by its share of the batch (as the engine sums them).
    total = {}
    for part in (slice(0, 2), slice(2, 4), slice(4, 5)):
        share = (part.stop - part.start) / 5
        for key, value in reward_means(rewards[part], desirable[part], 3, 2, share).items():
            total[key] = total.get(key, 0.0) + value * share
    assert total == pytest.approx(whole)


def test_a_kind_the_batch_lacks_has_no_mean():
    out = reward_means(torch.tensor([1.0, 3.0]), torch.tensor([True, True]), 2, 0, prefix="eval/")
    assert out == {"eval/desirable_reward": 2.0}


def test_pair_accuracy_over_the_pairs_with_both_rows():
    def row(desirable, pair):
        return TokenizedUnpaired([1], [2], desirable, pair)

    rows = [row(True, 1), row(False, 1), row(True, 2), row(False, 2), row(True, 3), row(False, None)]
    rewards = torch.tensor([0.5, 0.1, -1.0, 0.0, 9.0, 9.0])  # pair 1 right, pair 2 wrong, pair 3 incomplete
    assert pair_accuracy(rewards, rows) == 0.5
    assert pair_accuracy(rewards[4:], rows[4:]) is None
