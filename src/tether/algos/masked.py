"""Reductions restricted to the positions where a mask is 1.

Shapes: ``x`` and ``mask`` have the same shape, typically (B, A) = batch x response tokens.
``mask`` may be bool or 0/1 float. Masked-out entries of ``x`` are never read arithmetically
(``torch.where``), so padding may hold garbage (even inf/NaN) without poisoning results or grads.
"""

from __future__ import annotations

import torch


def zero_padding(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """x where mask is 1 else 0, in the broadcast shape of the two (a (B, 1) column of
    per-response values over a (B, A) mask gives (B, A)). A select, not a product: inf·0 and
    NaN·0 are NaN, so masking by multiplying lets garbage in padding through; this does not."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over masked positions; scalar if ``dim`` is None else reduced along ``dim``."""
    kept = zero_padding(x, mask)
    return kept.sum() if dim is None else kept.sum(dim=dim)


def _count(mask: torch.Tensor, dim: int | None, dtype: torch.dtype) -> torch.Tensor:
    m = mask.bool().to(dtype)
    return m.sum() if dim is None else m.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over masked positions (scalar if ``dim`` is None, else reduced along ``dim``).

    Where the mask sums to 0 along the reduction the result is 0, not NaN.
    """
    count = _count(mask, dim, x.dtype)
    # 0 / max(count, 1) = 0 for empty reductions.
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Scalar variance of the masked elements of ``x`` (any shape).

    Bessel-corrected (divide by n-1) when ``unbiased`` and n > 1; 0 when n == 0.
    """
    mean = masked_mean(x, mask)
    # Centre only kept entries: (NaN - mean)^2 would reach the mean's gradient through padding.
    var = masked_mean(zero_padding(x - mean, mask) ** 2, mask)
    n = _count(mask, None, x.dtype)
    if unbiased and n.item() > 1:
        var = var * n / (n - 1)  # Bessel's correction
    return var


def masked_whiten(
    x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) with mean/var over masked elements; same shape as ``x``.

    If ``shift_mean`` is False the mean is added back after scaling (only the scale changes).
    Masked-out positions are 0.
    """
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    whitened = zero_padding(x - mean, mask) * torch.rsqrt(var + eps)  # padding never meets the scale
    if not shift_mean:
        # lm-human-preferences / TRL `whiten(..., shift_mean=False)`: keep the mean, rescale only.
        whitened = whitened + mean
    return zero_padding(whitened, mask)
