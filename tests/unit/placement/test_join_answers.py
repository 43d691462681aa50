"""Joining the ranks' answers to a sampling worker's request (data parallel, asynchronous RL)."""

from __future__ import annotations

import pytest
import torch

from tether.placement.data_parallel import join_answers
from tether.rollout.worker import Sampled
from tether.types import Rollout


def rollout(rows: int, width: int, first: int) -> Rollout:
    ids = torch.arange(first, first + rows * width).reshape(rows, width)
    return Rollout(ids, torch.ones_like(ids), ids, torch.ones_like(ids), torch.ones(rows, dtype=torch.bool),
                   [f"p{first + i}" for i in range(rows)], [f"r{first + i}" for i in range(rows)])


def test_shares_are_joined_in_rank_order_with_the_slowest_ranks_seconds():
    a = Sampled(3, rollout(2, 2, 0), version=2, wait_s=0.5, generate_s=1.0)
    b = Sampled(3, rollout(1, 3, 10), version=2, wait_s=0.1, generate_s=1.5)  # an uneven, wider share
    got = join_answers([a, b], pad_id=-1)
    assert (got.key, got.version, got.wait_s, got.generate_s) == (3, 2, 0.5, 1.5)
    assert got.rollout.prompts == ["p0", "p1", "p10"]
    assert got.rollout.response_ids.tolist() == [[0, 1, -1], [2, 3, -1], [10, 11, 12]]
    assert got.rollout.prompt_ids.tolist() == [[-1, 0, 1], [-1, 2, 3], [10, 11, 12]]  # prompts left-padded


def test_ranks_that_disagree_on_the_version_are_a_bug():
    a = Sampled(3, rollout(1, 2, 0), version=2, wait_s=0.0, generate_s=1.0)
    b = Sampled(3, rollout(1, 2, 5), version=1, wait_s=0.0, generate_s=1.0)
    with pytest.raises(RuntimeError, match="different version"):
        join_answers([a, b], pad_id=0)


def test_plain_rollouts_are_concatenated():
    got = join_answers([rollout(1, 2, 0), rollout(1, 2, 4)], pad_id=0)
    assert got.prompts == ["p0", "p4"]
