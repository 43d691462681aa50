"""Monitoring statistics: explained variance, running moments, n-gram repetition."""

from __future__ import annotations

import math
from typing import Any, Hashable, Sequence

import torch

from tether.algos.masked import masked_var


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over masked tokens; (B, A) -> float, nan if Var(returns)==0."""
    with torch.no_grad():
        var_r = masked_var(returns, mask).item()
        if var_r == 0.0:
            return float("nan")
        return 1.0 - masked_var(returns - values, mask).item() / var_r


class RunningMoments:
    """Running mean/std over all elements seen, merged batch by batch (Chan et al. 1979 parallel
    variance; Welford 1962). ``std`` is Bessel-corrected; it is 1.0 before any data."""

    def __init__(self) -> None:
        self.mean = 0.0
        self.var = 1.0  # population variance of everything seen so far
        self.std = 1.0
        self.count = 0

    def update(self, x: torch.Tensor) -> tuple[float, float]:
        """Merge the elements of ``x`` (any shape); returns that batch's (mean, unbiased std).

        An empty ``x`` leaves the state unchanged and returns (0.0, 0.0).
        """
        n = x.numel()
        if n == 0:
            return 0.0, 0.0
        xd = x.detach().to(torch.float64)
        b_mean = xd.mean().item()
        b_var = xd.var(unbiased=False).item()
        total = self.count + n
        delta = b_mean - self.mean
        # Chan et al.: M2 = M2_a + M2_b + delta^2 * n_a * n_b / n.
        m2 = (self.var * self.count if self.count else 0.0) + b_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = m2 / total
        self.count = total
        self.std = math.sqrt(self.var * total / (total - 1)) if total > 1 else math.sqrt(self.var)
        b_std = math.sqrt(b_var * n / (n - 1)) if n > 1 else 0.0
        return b_mean, b_std

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "var": self.var, "std": self.std, "count": self.count}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.mean, self.var = float(d["mean"]), float(d["var"])
        self.std, self.count = float(d["std"]), int(d["count"])


def repetition_rate(tokens: Sequence[Hashable], n: int = 2) -> float:
    """Fraction of the sequence's n-grams that already appeared earlier in it (0.0 if < 2 n-grams)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if len(grams) < 2:
        return 0.0
    seen: set[tuple] = set()
    repeats = 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)
