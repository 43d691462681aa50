"""Micro-batches by token budget: a batch's rows binned by length so each micro-batch holds at
most ``budget`` tokens (``optim.micro_batch_tokens``, ``rl.micro_batch_tokens``).

A row count per micro-batch (``grad_accum_steps``) sizes memory for the longest rows and wastes
it on short ones; a token budget keeps every micro-batch's activations about the same size
whatever the length mix. The partition does not change the step: the training engine weighs
each micro-batch by its share of the batch (tokens or rows), so any partition gives the batch's
loss and gradient up to float summation order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def token_budget_bins(lengths: Sequence[int], budget: int, padded: bool) -> list[list[int]]:
    """Micro-batches of the rows of ``lengths`` (each a list of indices into it), each costing at
    most ``budget`` tokens; a row longer than the budget alone in its own micro-batch.

    ``lengths``: (N,) each row's tokens. ``padded``: a micro-batch costs its rows x its longest
    row (padded batches) rather than the sum of its rows' lengths (padding-free batches).

    First-fit decreasing: rows longest first (ties: lower index first), each into the first
    micro-batch it fits in, else a new one. The micro-batches come in the order they were
    opened (so the one with the longest row first), each one's indices ascending: the same
    lengths always give the same micro-batches.
    """
    if budget < 1:
        raise ValueError(f"token budget {budget}: expected at least 1 token per micro-batch")
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    bins: list[list[int]] = []
    costs: list[int] = []
    longest: list[int] = []  # each bin's first row is its longest (rows come longest first)
    for i in order:
        n = int(lengths[i])
        for b, members in enumerate(bins):
            cost = (len(members) + 1) * longest[b] if padded else costs[b] + n
            if cost <= budget:
                members.append(i)
                costs[b] = cost
                break
        else:
            bins.append([i])
            costs.append(n)
            longest.append(n)
    return [sorted(members) for members in bins]


def rows_by_token_budget(rows: Sequence[int], tokens_of, budget: int, padded: bool) -> list[list[int]]:
    """A batch's ``rows`` (row ids) as micro-batches of row ids within ``budget`` tokens,
    ``tokens_of(row)`` being a row's tokens: :func:`token_budget_bins` over the batch."""
    return [[rows[i] for i in members] for members in token_budget_bins([tokens_of(r) for r in rows], budget, padded)]


def split_by_token_budget(minibatch: Tensor, tokens: Sequence[int], budget: int, padded: bool) -> list[Tensor]:
    """An RL minibatch (a (M,) long tensor of experience rows) as micro-batch index tensors
    within ``budget`` tokens, ``tokens[row]`` being an experience row's real tokens (prompt +
    response): :func:`token_budget_bins` over the minibatch's rows."""
    rows = minibatch.tolist()
    return [torch.tensor(members, dtype=torch.long)
            for members in rows_by_token_budget(rows, tokens.__getitem__, budget, padded)]


def minibatch_order(n: int, group_size: int, generator: torch.Generator) -> Tensor:
    """(n,) a shuffled order of an experience's rows for one epoch: rows shuffled one by one
    (``group_size`` 1, exactly ``torch.randperm(n)``), or whole groups of ``group_size``
    consecutive rows shuffled together, each group's rows kept in order (an algorithm whose
    loss compares a prompt's responses: the registry's ``whole_groups``)."""
    if group_size == 1:
        return torch.randperm(n, generator=generator)
    if n % group_size:
        raise ValueError(f"{n} rows do not split into groups of {group_size}")
    groups = torch.randperm(n // group_size, generator=generator)
    return (groups[:, None] * group_size + torch.arange(group_size)).reshape(-1)
