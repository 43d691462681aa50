"""WARM's weight averaging (models/averaging.py), hand-worked, and what it refuses."""

from __future__ import annotations

import pytest
import torch

from tether.models.averaging import average_state_dicts


def test_the_mean_of_each_weight_and_equal_integer_buffers_kept():
    a = {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([[0.5]], dtype=torch.bfloat16), "pos": torch.arange(3)}
    b = {"w": torch.tensor([3.0, -2.0]), "h": torch.tensor([[1.5]], dtype=torch.bfloat16), "pos": torch.arange(3)}
    c = {"w": torch.tensor([2.0, 3.0]), "h": torch.tensor([[1.0]], dtype=torch.bfloat16), "pos": torch.arange(3)}
    out = average_state_dicts(iter([a, b, c]))
    assert torch.equal(out["w"], torch.tensor([2.0, 1.0]))
    assert out["h"].dtype == torch.bfloat16 and float(out["h"]) == 1.0
    assert torch.equal(out["pos"], torch.arange(3))
    assert torch.equal(average_state_dicts([a])["w"], a["w"])


@pytest.mark.parametrize("other, needle", [
    ({"w": torch.zeros(2)}, "B has other weights than A (extra [], missing ['pos'])"),
    ({"w": torch.zeros(3), "pos": torch.arange(3)}, "B's w is (3,) torch.float32, A's (2,) torch.float32"),
    ({"w": torch.zeros(2), "pos": torch.arange(1, 4)}, "B's pos (not floating point) differs from A's"),
])
def test_members_that_differ_are_named(other, needle):
    a = {"w": torch.zeros(2), "pos": torch.arange(3)}
    with pytest.raises(ValueError) as err:
        average_state_dicts([a, other], ["A", "B"])
    assert needle in str(err.value)
    with pytest.raises(ValueError, match="at least one"):
        average_state_dicts([])
