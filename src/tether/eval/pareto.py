"""The Pareto front of policies measured on several objectives: which settings no other beats on
every objective at once.

A point is a tuple of numbers, one per objective; ``senses`` says for each whether more is better
(+1: gold, the reward model's score) or less (-1: the rate of a cost such as '!'). Point ``a``
dominates ``b`` when it is at least as good on every objective and strictly better on one; the
front is the points no other dominates (ties kept: two equal points are both on it).
"""

from __future__ import annotations

from collections.abc import Sequence


def dominates(a: Sequence[float], b: Sequence[float], senses: Sequence[int]) -> bool:
    """Whether ``a`` is at least as good as ``b`` on every objective and better on one."""
    if not len(a) == len(b) == len(senses):
        raise ValueError(f"points of {len(a)} and {len(b)} numbers for {len(senses)} objectives")
    if any(s not in (1, -1) for s in senses):
        raise ValueError(f"senses must each be +1 (more is better) or -1 (less is better), got {list(senses)}")
    better = [s * (x - y) for x, y, s in zip(a, b, senses)]
    return all(d >= 0 for d in better) and any(d > 0 for d in better)


def pareto_front(points: Sequence[Sequence[float]], senses: Sequence[int]) -> list[int]:
    """The indices of the points no other point dominates, in the order given."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p, senses) for j, q in enumerate(points) if j != i)]


__all__ = ["dominates", "pareto_front"]
