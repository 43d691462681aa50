"""A composed reward's maths (``reward.terms``): the weighted sum of the terms' scores, each
term's batch mean for the logs, and the built-in length penalty."""

from __future__ import annotations

import torch
from torch import Tensor


def combine_terms(scores: Tensor, weights: list[float] | Tensor) -> Tensor:
    """(B, T) raw term scores and T weights -> (B,) sum_t weight_t * score_t, in float32."""
    w = torch.as_tensor(weights, dtype=torch.float32, device=scores.device)
    if scores.ndim != 2 or scores.shape[1] != w.numel():
        raise ValueError(f"term scores of shape {tuple(scores.shape)} for {w.numel()} weights; expected (B, {w.numel()})")
    return (scores.float() * w).sum(dim=1)


def term_means(scores: Tensor, names: list[str]) -> dict[str, float]:
    """(B, T) raw term scores -> {"reward/<name>": the batch mean of that term, unweighted}."""
    means = scores.float().mean(dim=0).tolist()
    return {f"reward/{name}": mean for name, mean in zip(names, means, strict=True)}


def length_penalty(lengths: Tensor, coef: float, target: int) -> Tensor:
    """(B,) response lengths in tokens -> (B,) -coef * max(0, length - target), in float32."""
    return -coef * (lengths.float() - target).clamp(min=0)
