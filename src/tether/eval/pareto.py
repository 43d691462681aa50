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


def gold_at_kl(curve: Sequence[tuple[float, float]], kl: float) -> float | None:
    """The gold score where a run's KL first reaches ``kl``: ``curve``, (KL, gold) points in
    training order, starting from the starting policy's (0, its gold); linear between the two
    consecutive points that straddle ``kl`` (in either direction: a sampled KL estimate can dip,
    even below 0), the point's own gold at an exact hit, None when the run never gets there. For
    comparing runs at matched KL (each run's held-out evaluations along the way)."""
    for (k0, g0), (k1, g1) in zip(curve, curve[1:]):
        if k0 == kl:
            return g0
        if min(k0, k1) <= kl <= max(k0, k1):
            return g0 + (g1 - g0) * (kl - k0) / (k1 - k0)
    if curve and curve[-1][0] == kl:
        return curve[-1][1]
    return None


def matched_kl(curves: dict[str, Sequence[tuple[float, float]]]) -> tuple[float, dict[str, float | None]]:
    """(the KL every run reached: the smallest last KL, each run's :func:`gold_at_kl` there)."""
    target = min(curve[-1][0] for curve in curves.values())
    return target, {label: gold_at_kl(curve, target) for label, curve in curves.items()}


__all__ = ["dominates", "gold_at_kl", "matched_kl", "pareto_front"]
