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
"""

from __future__ import annotations

import torch

from tether.algos.group import grouped

CHOSEN, REJECTED = 1, -1


def best_worst_pairs(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B,) scores -> (B,) long: +1 at each group's best row, −1 at its worst, 0 elsewhere;
    all 0 in a group whose scores are all equal (no preference to learn from)."""
    if group_size < 2:
        raise ValueError(f"a preference pair needs at least 2 samples per prompt (group.size), got {group_size}")
    g = grouped(scores.float(), group_size)
    best, worst = first_argmax(g), first_argmax(-g)
    sign = torch.zeros_like(g, dtype=torch.long)
    rows = torch.arange(g.shape[0], device=g.device)
    sign[rows, best] = CHOSEN
    sign[rows, worst] = REJECTED
    sign[g.max(dim=1).values == g.min(dim=1).values] = 0
    return sign.reshape(-1)


def best_of_group(scores: torch.Tensor, group_size: int, keep: int = 1,
                  min_score: float | None = None) -> torch.Tensor:
    """(B,) scores -> (B,) bool: each group's ``keep`` highest-scoring rows (ties: the earlier),
    less those scoring below ``min_score`` when it is given."""
    if not 1 <= keep <= group_size:
        raise ValueError(f"keep {keep} of a group of {group_size}: expected 1 <= keep <= group size")
    g = grouped(scores.float(), group_size)
    # A stable sort on the negated scores: the earlier of equal rows ranks first.
    order = torch.sort(-g, dim=1, stable=True).indices[:, :keep]
    chosen = torch.zeros_like(g, dtype=torch.bool).scatter_(1, order, True)
    if min_score is not None:
        chosen &= g >= min_score
    return chosen.reshape(-1)


def first_argmax(x: torch.Tensor) -> torch.Tensor:
    """(G, K) -> (G,) the first column holding each row's maximum."""
    is_max = x == x.max(dim=1, keepdim=True).values
    positions = torch.arange(x.shape[1], device=x.device).expand_as(x)
    return torch.where(is_max, positions, torch.full_like(positions, x.shape[1])).min(dim=1).values
