"""Per-token estimators of KL(pi || pi_ref) for tokens sampled from pi.

All take ``logp`` = log pi(a_t|s_t) and ``ref_logp`` = log pi_ref(a_t|s_t), shape (B, A),
and return an elementwise estimate of shape (B, A). Schulman 2020, "Approximating KL divergence".
"""

from __future__ import annotations

import torch

KL_KINDS = ("k1", "k2", "k3")


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log pi - log pi_ref: unbiased, high variance, can be negative per token."""
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 (log pi - log pi_ref)^2: biased, low variance, >= 0."""
    return 0.5 * (logp - ref_logp) ** 2


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = exp(d) - 1 - d with d = log pi_ref - log pi: unbiased and always >= 0."""
    d = ref_logp - logp
    # expm1(d) - d == exp(d) - 1 - d without cancellation for small d (Schulman 2020, k3).
    return torch.expm1(d) - d


_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str) -> torch.Tensor:
    """Dispatch to the estimator named ``kind`` (one of ``KL_KINDS``); (B, A) -> (B, A)."""
    try:
        fn = _ESTIMATORS[kind]
    except KeyError:
        raise ValueError(f"unknown KL estimator {kind!r}; valid kinds: {', '.join(KL_KINDS)}") from None
    return fn(logp, ref_logp)
