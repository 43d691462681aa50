"""The update's epoch order: rows one by one, or whole groups together."""

from __future__ import annotations

import pytest
import torch

from tether.loops.micro_batches import minibatch_order


def test_one_row_groups_are_torch_randperm_exactly():
    a = minibatch_order(10, 1, torch.Generator().manual_seed(3))
    assert torch.equal(a, torch.randperm(10, generator=torch.Generator().manual_seed(3)))


def test_groups_move_together_in_order():
    order = minibatch_order(8, 2, torch.Generator().manual_seed(0)).tolist()
    assert sorted(order) == list(range(8))
    pairs = [order[i:i + 2] for i in range(0, 8, 2)]
    assert all(b == a + 1 and a % 2 == 0 for a, b in pairs)
    groups = torch.randperm(4, generator=torch.Generator().manual_seed(0)).tolist()
    assert [a // 2 for a, _ in pairs] == groups


def test_rows_must_split_into_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        minibatch_order(6, 4, torch.Generator())
