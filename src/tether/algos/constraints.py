"""Constrained objectives (Safe RLHF; Dai et al. 2023): maximise a reward subject to expected
costs staying within limits, ``E[c_k] <= d_k``, by the Lagrangian relaxation.

With multipliers ``lambda_k >= 0`` the policy is trained on the shaped score

    s = (r - sum_k lambda_k c_k) / (1 + sum_k lambda_k)

(Safe RLHF's form: the denominator keeps the score's scale as the multipliers grow, so the
learning rate means the same at every lambda), and after each batch every multiplier takes a
projected dual-ascent step on its constraint's violation ``E[c_k] - d_k``:

    lambda_k <- clip(lambda_k + lr * (E[c_k] - d_k), 0, max_multiplier)

Safe RLHF steps ``log lambda`` instead (a multiplicative update); the projected additive step is the
one of Lagrangian PPO (Ray et al. 2019) and moves a multiplier off 0 at once when a limit is broken.
``max_multiplier`` bounds a constraint that can never be met: its multiplier stops there and the
caller reports the violation rather than letting the score shrink toward ``-c``.
"""

from __future__ import annotations

from torch import Tensor


def violation(cost_mean: Tensor, limit: Tensor) -> Tensor:
    """(K,) ``E[c_k] - d_k``: positive where a constraint is broken."""
    return cost_mean - limit


def dual_ascent(multipliers: Tensor, cost_mean: Tensor, limit: Tensor, lr: float, max_multiplier: float) -> Tensor:
    """(K,) the multipliers after one projected step: ``clip(lambda + lr * (E[c] - d), 0, max_multiplier)``."""
    if lr <= 0 or max_multiplier <= 0:
        raise ValueError(f"dual_ascent needs lr > 0 and max_multiplier > 0, got lr={lr}, max_multiplier={max_multiplier}")
    return (multipliers + lr * violation(cost_mean, limit)).clamp(0.0, max_multiplier)


def constrained_score(reward: Tensor, costs: Tensor, multipliers: Tensor) -> Tensor:
    """(B,) the shaped score ``(r - costs @ lambda) / (1 + sum lambda)`` from reward (B,), costs
    (B, K) and multipliers (K,)."""
    if costs.shape != (reward.shape[0], multipliers.shape[0]):
        raise ValueError(f"costs of shape {tuple(costs.shape)} do not match {reward.shape[0]} rewards and "
                         f"{multipliers.shape[0]} multipliers")
    lam = multipliers.to(reward.dtype)
    return (reward - costs.to(reward.dtype) @ lam) / (1.0 + lam.sum())


__all__ = ["constrained_score", "dual_ascent", "violation"]
