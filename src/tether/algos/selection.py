"""Choosing among a prompt's own samples: the pairs of online DPO and the winners of
rejection sampling. Rows come in groups of ``group_size`` consecutive responses to one prompt.

- Online (iterative) DPO (Guo et al. 2024; Xiong et al. 2024, "Iterative Preference Learning
  from Human Feedback"): of a prompt's k samples, the highest-scoring is "chosen" and the
  lowest-scoring "rejected"; a group whose samples all score the same states no preference and
  is left out.
- Rejection-sampling fine-tuning (Touvron et al. 2023, Llama 2 sec. 3.2.3; Dong et al. 2023,
  RAFT): the best ``keep`` of a prompt's N samples (best-of-N), optionally only those scoring
  at least ``min_score``, are the targets of supervised fine-tuning.

Ties are broken towards the earlier row, so the same scores always give the same choice.

A NaN score is no score (a reward source that failed on that response, not a judgement of it):
its row is never chosen, never rejected and never kept, and the choice is made among the group's
other rows as if it were not there. A group with fewer than two scored rows (or whose scored
rows all score the same) makes no pair; a group whose scores are all NaN keeps no row. ±inf are
ordinary scores (+inf above every finite score, −inf below). Both functions follow this one rule.
"""

from __future__ import annotations

import torch

from tether.algos.group import grouped

CHOSEN, REJECTED = 1, -1


def best_worst_pairs(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B,) scores -> (B,) long: +1 at each group's best scored row, −1 at its worst, 0 elsewhere;
    all 0 in a group whose scored rows all score the same or are fewer than two (no preference to
    learn from). NaN rows are never in a pair (module docstring)."""
    if group_size < 2:
        raise ValueError(f"a preference pair needs at least 2 samples per prompt (group.size), got {group_size}")
    g = grouped(scores.float(), group_size)
    scored = ~torch.isnan(g)
    inf = torch.full_like(g, float("inf"))
    high = torch.where(scored, g, -inf).max(dim=1, keepdim=True).values  # −inf: no scored row
    low = torch.where(scored, g, inf).min(dim=1, keepdim=True).values  # +inf: no scored row
    best, worst = first_true(scored & (g == high)), first_true(scored & (g == low))
    # high > low only with two scored rows of different scores (none: −inf > inf is False).
    has_pair = (high > low).squeeze(1)
    sign = torch.zeros_like(g, dtype=torch.long)
    rows = torch.arange(g.shape[0], device=g.device)[has_pair]
    sign[rows, best[has_pair]] = CHOSEN
    sign[rows, worst[has_pair]] = REJECTED
    return sign.reshape(-1)


def best_of_group(scores: torch.Tensor, group_size: int, keep: int = 1,
                  min_score: float | None = None) -> torch.Tensor:
    """(B,) scores -> (B,) bool: each group's ``keep`` highest-scoring rows (ties: the earlier),
    less those scoring below ``min_score`` when it is given. NaN rows are never kept and take no
    place: a group with fewer than ``keep`` scored rows keeps all its scored rows (module docstring)."""
    if not 1 <= keep <= group_size:
        raise ValueError(f"keep {keep} of a group of {group_size}: expected 1 <= keep <= group size")
    g = grouped(scores.float(), group_size)
    scored = ~torch.isnan(g)
    # Row i's rank in its group: the scored rows above it, and the scored rows level with it that
    # come earlier. A count, not a sort: it needs no rule for where a sort puts NaN.
    a, b = g[:, :, None], g[:, None, :]  # (G, K, 1) row i, (G, 1, K) row j
    earlier = torch.ones(group_size, group_size, dtype=torch.bool, device=g.device).tril(-1)  # [i, j]: j < i
    ahead = scored[:, None, :] & ((b > a) | ((b == a) & earlier))
    chosen = scored & (ahead.sum(dim=2) < keep)
    if min_score is not None:
        chosen &= g >= min_score
    return chosen.reshape(-1)


def first_true(flags: torch.Tensor) -> torch.Tensor:
    """(G, K) bool -> (G,) long: the first column that is True in each row; K where none is."""
    positions = torch.arange(flags.shape[1], device=flags.device).expand_as(flags)
    return torch.where(flags, positions, torch.full_like(positions, flags.shape[1])).min(dim=1).values

