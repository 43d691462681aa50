"""How a batch is split over ranks: contiguous training slices, padded read-only shares whose pad
rows repeat the last row, strided shares, and putting per-rank results back together."""

from __future__ import annotations

import pytest
import torch

from tether.distributed import shard
from tether.distributed.shard import concat, gather_rows, head, rank_slice, shard_rows, strided, take
from tether.types import Experience, Rollout


def as_rank(monkeypatch, r: int, w: int) -> None:
    """Pretend this process is rank ``r`` of ``w`` (shard's own names for the rank helpers)."""
    monkeypatch.setattr(shard, "rank", lambda: r)
    monkeypatch.setattr(shard, "world_size", lambda: w)


def rollout(b: int) -> Rollout:
    """Row i: prompt ids [10i, 10i+1], response ids [100+i], prompt text f"p{i}"."""
    prompt = torch.tensor([[10 * i, 10 * i + 1] for i in range(b)])
    return Rollout(prompt, torch.ones(b, 2, dtype=torch.long), torch.tensor([[100 + i] for i in range(b)]),
                   torch.ones(b, 1, dtype=torch.long), torch.tensor([i % 2 == 0 for i in range(b)]),
                   [f"p{i}" for i in range(b)], [f"r{i}" for i in range(b)])


def experience(b: int) -> Experience:
    ro = rollout(b)
    col = torch.arange(b, dtype=torch.float32).view(b, 1)
    return Experience(ro, logprobs=-col, ref_logprobs=-2 * col, values=None, scores=torch.arange(b) * 1.5,
                      rewards=col, advantages=col + 0.5, returns=col + 1.0)


# -- rank_slice ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, r, w, expected", [
    (10, 0, 2, slice(0, 5)),
    (10, 1, 2, slice(5, 10)),
    (12, 0, 3, slice(0, 4)),
    (12, 1, 3, slice(4, 8)),
    (12, 2, 3, slice(8, 12)),
    (8, 3, 4, slice(6, 8)),
    (7, 0, 1, slice(0, 7)),
])
def test_rank_slice_is_the_contiguous_share(n, r, w, expected):
    assert rank_slice(n, r, w) == expected


def test_rank_slice_defaults_to_this_process(monkeypatch):
    assert rank_slice(6) == slice(0, 6)  # one process: everything
    as_rank(monkeypatch, 2, 3)
    assert rank_slice(9) == slice(6, 9)
    assert rank_slice(9, rank_index=0) == slice(0, 3)
    assert rank_slice(9, world=9) == slice(2, 3)


def test_rank_slices_cover_every_row_once():
    rows = list(range(24))
    parts = [rows[rank_slice(24, r, 4)] for r in range(4)]
    assert parts == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17], [18, 19, 20, 21, 22, 23]]


# -- take ------------------------------------------------------------------------------------------


def test_take_list_tuple_and_tensor():
    assert take(["a", "b", "c", "d"], slice(2, 4)) == ["c", "d"]
    assert take(("a", "b", "c", "d"), slice(0, 2)) == ("a", "b")
    t = torch.arange(12).view(6, 2)
    assert torch.equal(take(t, slice(2, 4)), torch.tensor([[4, 5], [6, 7]]))


def test_take_rollout_rows():
    part = take(rollout(4), slice(2, 4))
    assert isinstance(part, Rollout) and len(part) == 2
    assert torch.equal(part.prompt_ids, torch.tensor([[20, 21], [30, 31]]))
    assert torch.equal(part.response_ids, torch.tensor([[102], [103]]))
    assert torch.equal(part.ended, torch.tensor([True, False]))
    assert part.prompts == ["p2", "p3"] and part.responses == ["r2", "r3"]
    assert part.sampled_logprobs is None


def test_take_experience_rows_follows_the_nested_rollout():
    part = take(experience(6), slice(3, 6))
    assert len(part) == 3 and part.rollout.prompts == ["p3", "p4", "p5"]
    assert torch.equal(part.scores, torch.tensor([4.5, 6.0, 7.5]))
    assert torch.equal(part.logprobs, torch.tensor([[-3.0], [-4.0], [-5.0]]))
    assert torch.equal(part.returns, torch.tensor([[4.0], [5.0], [6.0]]))
    assert part.values is None


# -- shard_rows ------------------------------------------------------------------------------------


def test_shard_rows_one_process_is_everything():
    rows = ["a", "b", "c"]
    share, padded = shard_rows(rows, 3)
    assert share == ["a", "b", "c"] and padded == 3


@pytest.mark.parametrize("r, expected", [(0, ["a", "b", "c"]), (1, ["d", "e", "e"])])
def test_shard_rows_pads_five_rows_to_six_over_two_ranks(monkeypatch, r, expected):
    as_rank(monkeypatch, r, 2)
    share, padded = shard_rows(["a", "b", "c", "d", "e"], 5)
    assert padded == 6
    assert share == expected


@pytest.mark.parametrize("r, expected", [(0, [0, 1, 2]), (1, [3, 4, 5]), (2, [6, 6, 6])])
def test_shard_rows_pads_seven_rows_to_nine_over_three_ranks(monkeypatch, r, expected):
    as_rank(monkeypatch, r, 3)
    share, padded = shard_rows(list(range(7)), 7)
    assert padded == 9
    assert share == expected


def test_shard_rows_without_padding_when_it_divides(monkeypatch):
    as_rank(monkeypatch, 1, 4)
    share, padded = shard_rows(list(range(8)), 8)
    assert padded == 8 and share == [2, 3]


def test_shard_rows_a_tuple_is_padded_as_a_list(monkeypatch):
    as_rank(monkeypatch, 1, 2)
    share, padded = shard_rows(("x", "y", "z"), 3)
    assert padded == 4 and list(share) == ["z", "z"]


def test_shard_rows_fewer_rows_than_ranks(monkeypatch):
    # 2 rows over 4 ranks: padded to 4, ranks 2 and 3 each get a copy of the last row.
    for r, expected in [(0, ["a"]), (1, ["b"]), (2, ["b"]), (3, ["b"])]:
        as_rank(monkeypatch, r, 4)
        assert shard_rows(["a", "b"], 2) == (expected, 4)


@pytest.mark.parametrize("r, rows", [(0, [0, 1]), (1, [2, 2])])
def test_shard_rows_pads_a_rollout_with_its_last_row(monkeypatch, r, rows):
    as_rank(monkeypatch, r, 2)
    share, padded = shard_rows(rollout(3), 3)
    assert padded == 4 and len(share) == 2
    assert torch.equal(share.prompt_ids, torch.tensor([[10 * i, 10 * i + 1] for i in rows]))
    assert torch.equal(share.response_ids, torch.tensor([[100 + i] for i in rows]))
    assert share.prompts == [f"p{i}" for i in rows] and share.responses == [f"r{i}" for i in rows]


def test_shard_rows_pads_an_experience_over_three_ranks(monkeypatch):
    # 4 rows over 3 ranks: padded to 6; rank 1 holds rows 2, 3; rank 2 holds the last row twice.
    as_rank(monkeypatch, 1, 3)
    share, padded = shard_rows(experience(4), 4)
    assert padded == 6
    assert share.rollout.prompts == ["p2", "p3"] and torch.equal(share.scores, torch.tensor([3.0, 4.5]))
    as_rank(monkeypatch, 2, 3)
    share, _ = shard_rows(experience(4), 4)
    assert share.rollout.prompts == ["p3", "p3"] and torch.equal(share.scores, torch.tensor([4.5, 4.5]))
    assert torch.equal(share.advantages, torch.tensor([[3.5], [3.5]]))


# -- strided ---------------------------------------------------------------------------------------


def test_strided_takes_every_world_size_th_item(monkeypatch):
    items = list(range(8))
    assert strided(items) == items  # one process
    as_rank(monkeypatch, 1, 3)
    assert strided(items) == [1, 4, 7]
    as_rank(monkeypatch, 2, 3)
    assert strided(items) == [2, 5]
    as_rank(monkeypatch, 0, 3)
    assert strided(items) == [0, 3, 6]


# -- concat / head / gather_rows -------------------------------------------------------------------


def test_concat_tensors_in_rank_order():
    out = concat([torch.tensor([[1, 2]]), torch.tensor([[3, 4], [5, 6]])])
    assert torch.equal(out, torch.tensor([[1, 2], [3, 4], [5, 6]]))


def test_concat_tuples_element_by_element_and_none():
    parts = [(torch.tensor([1.0]), None, ["a"]), (torch.tensor([2.0, 3.0]), None, ["b", "c"])]
    values, nothing, names = concat(parts)
    assert torch.equal(values, torch.tensor([1.0, 2.0, 3.0]))
    assert nothing is None and names == ["a", "b", "c"]
    assert concat([None, None]) is None


def test_concat_lists_and_unknown_types():
    assert concat([[1, 2], [3], []]) == [1, 2, 3]
    with pytest.raises(TypeError, match="cannot gather results of type dict"):
        concat([{"a": 1}, {"a": 2}])


def test_head_drops_padding_rows():
    assert torch.equal(head(torch.arange(6), 4), torch.tensor([0, 1, 2, 3]))
    assert head([5, 6, 7], 2) == [5, 6]
    assert head(None, 3) is None
    first, second = head((torch.tensor([1, 2, 3, 3]), None), 3)
    assert torch.equal(first, torch.tensor([1, 2, 3])) and second is None
    ro = head(rollout(4), 3)
    assert ro.prompts == ["p0", "p1", "p2"] and torch.equal(ro.response_ids, torch.tensor([[100], [101], [102]]))
    assert head(7, 2) == 7  # anything else is carried as is


def test_padding_then_concat_then_head_gives_the_rows_back(monkeypatch):
    # What gather_rows does over three ranks, with each rank's share computed separately.
    rows = torch.tensor([10.0, 11.0, 12.0, 13.0])
    parts = []
    for r in range(3):
        as_rank(monkeypatch, r, 3)
        share, padded = shard_rows(list(rows), 4)
        parts.append(torch.stack(share) * 2)
    assert padded == 6 and [len(p) for p in parts] == [2, 2, 2]
    assert torch.equal(head(concat(parts), 4), torch.tensor([20.0, 22.0, 24.0, 26.0]))


def test_gather_rows_is_the_identity_in_one_process():
    t = torch.arange(5)
    assert gather_rows(t, 3) is t  # no truncation either: one process has no padding
    ro = rollout(2)
    assert gather_rows(ro, 2) is ro
    assert gather_rows((t, None), 5, device="cpu")[0] is t
