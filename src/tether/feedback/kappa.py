"""Agreement between annotators beyond chance: Cohen's κ for two, Fleiss' κ for more, each
annotator's agreement with the others' majority, and the majority vote itself.

κ = (p_o − p_e) / (1 − p_e): p_o the observed agreement, p_e the agreement expected by chance.

- Cohen (1960): p_e = Σ_c p_A(c)·p_B(c) from each annotator's own label frequencies, over the
  items both labelled.
- Fleiss (1971): items each rated by the same number n of annotators; with n_ic the number who
  put item i in category c, P_i = (Σ_c n_ic² − n) / (n(n − 1)), p_o = mean_i P_i,
  p_c = Σ_i n_ic / (N·n), p_e = Σ_c p_c².

When p_e = 1 (everyone always used one category) κ is undefined; it is returned as 1.0 if the
agreement is perfect and 0.0 otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence


def _kappa(observed: float, expected: float) -> float:
    if expected >= 1.0:
        return 1.0 if observed >= 1.0 else 0.0
    return (observed - expected) / (1.0 - expected)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's κ of two annotators' labels of the same items, in the same order."""
    if len(a) != len(b) or not a:
        raise ValueError(f"Cohen's kappa needs two equally long, non-empty label lists, got {len(a)} and {len(b)}")
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[c] * cb[c] for c in ca) / (n * n)
    return _kappa(observed, expected)


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float:
    """Fleiss' κ from an items × categories table of counts; every row must sum to the same n ≥ 2."""
    if not counts:
        raise ValueError("Fleiss' kappa needs at least one item")
    n = sum(counts[0])
    if n < 2 or any(sum(row) != n for row in counts):
        raise ValueError("Fleiss' kappa needs every item rated by the same number (>= 2) of annotators")
    items = len(counts)
    observed = sum((sum(c * c for c in row) - n) / (n * (n - 1)) for row in counts) / items
    totals = [sum(row[j] for row in counts) for j in range(len(counts[0]))]
    expected = sum((t / (items * n)) ** 2 for t in totals)
    return _kappa(observed, expected)


def majority(labels: Sequence[Hashable]) -> Hashable | None:
    """The most common label, or None when two or more labels tie for the most votes."""
    if not labels:
        return None
    (top, votes), *rest = Counter(labels).most_common()
    return None if rest and rest[0][1] == votes else top


def agreement_with_majority(by_item: dict[Hashable, dict[str, Hashable]]) -> dict[str, float | None]:
    """Per annotator: how often their label equals the majority of the *other* annotators of the
    same item (items where the others have a clear majority); None when there was none."""
    hits: Counter = Counter()
    seen: Counter = Counter()
    for labels in by_item.values():
        for who, label in labels.items():
            others = majority([lab for other, lab in labels.items() if other != who])
            if others is not None:
                seen[who] += 1
                hits[who] += label == others
    names = sorted({who for labels in by_item.values() for who in labels})
    return {who: (hits[who] / seen[who] if seen[who] else None) for who in names}
