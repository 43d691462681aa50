"""The teacher endpoint's log-probs mapped back to response positions (roles/remote_teacher.py):
per row, the k-th real token's log-prob lands on that token's position; padding on either side,
and a None (the first token's), read 0."""

from __future__ import annotations

import torch

from tether.roles.remote_teacher import response_logprobs
from tether.types import Rollout


def test_log_probs_land_on_their_response_positions_by_hand():
    # Row 0: prompt [pad, 11, 12], response [21, 22, pad]; row 1: prompt [13, 14, 15], response [23, 24, 25].
    prompt_mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    response_mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    ro = Rollout(torch.tensor([[0, 11, 12], [13, 14, 15]]), prompt_mask, torch.tensor([[21, 22, 0], [23, 24, 25]]),
                 response_mask, torch.tensor([True, False]), ["a", "b"], ["x", "y"])
    per_sequence = [[None, -0.1, -0.2, -0.3], [None, -1.0, -2.0, -3.0, -4.0, -5.0]]
    expected = torch.tensor([[-0.2, -0.3, 0.0], [-3.0, -4.0, -5.0]])
    assert torch.equal(response_logprobs(ro, per_sequence), expected)
    # A None inside the response (an endpoint that skipped a token) reads 0 there.
    per_sequence[1][4] = None
    assert response_logprobs(ro, per_sequence)[1].tolist() == [-3.0, 0.0, -5.0]
