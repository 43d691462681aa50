"""On-policy distillation's per-token maths: how far the student is from the teacher on the tokens
the student sampled, and the advantage whose policy gradient closes that distance.

The student S samples y; a frozen teacher T scores every sampled token. With ρ_t = T(y_t)/S(y_t)
(both at the sampling temperature, given the same prefix) the divergences are expectations over
the student's own tokens, so the sampled token estimates them without the teacher's whole
distribution (an endpoint teacher returns only the sampled tokens' log-probs):

* reverse KL (Gu et al. 2024, MiniLLM; Agarwal et al. 2024, GKD with the student's samples):
  KL(S‖T) = E_S[−log ρ].
* the generalised Jensen–Shannon divergence of GKD, JSD_β(T‖S) = β·KL(T‖M) + (1−β)·KL(S‖M) with
  M = β·T + (1−β)·S; as an expectation over S (T/M = ρ/m, S/M = 1/m, m = β·ρ + 1 − β):
  JSD_β = E_S[β·ρ·log(ρ/m) − (1−β)·log m]. It tends to 0 at β = 0 and 1; divided by β it tends
  to the forward KL KL(T‖S) as β → 0, divided by 1 − β to the reverse KL as β → 1.

**The advantage.** For an f-divergence E_S[f(ρ)] at one position (prefix fixed), the gradient in
the student's weights is E_S[(f(ρ) − ρ·f'(ρ))·∇log S(y)] (the score-function term and the one
through ρ). For the reverse KL f = −log ρ, f − ρf' = 1 − log ρ: the advantage is log ρ = log T −
log S, the constant dropped (its expected gradient is 0). For the JSD f' = β·log(ρ/m), so
f − ρf' = −(1−β)·log m: the advantage is (1−β)·log(β·ρ + 1 − β). Each is exact in expectation
for the divergence at that position; a token's own term alone (``discount`` 0, as in
Thinking Machines' on-policy distillation) leaves out how it moves the later positions' prefixes,
``discount`` 1 sums the later tokens' terms too (the whole sequence's divergence, MiniLLM's form,
with more variance).

**A difference from GKD.** GKD takes the divergence over the whole vocabulary at every position
and differentiates it directly; here it is estimated from the sampled token and trained by the
policy gradient above, so a teacher that returns only per-token log-probs (an endpoint) works, at
the cost of sampling variance.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tether.algos.gae import gae_advantages
from tether.algos.masked import zero_padding

DIVERGENCES = ("reverse_kl", "jsd")


def log_mixture_ratio(log_ratio: Tensor, beta: float) -> Tensor:
    """log m = log(β·ρ + 1 − β) of (B, A) ``log_ratio`` = log ρ = log T − log S, computed as a
    log-sum-exp (no overflow for a large ρ). β in (0, 1)."""
    _check_beta(beta)
    return torch.logaddexp(log_ratio + math.log(beta), torch.full_like(log_ratio, math.log1p(-beta)))


def token_divergence(student_logp: Tensor, teacher_logp: Tensor, divergence: str = "reverse_kl",
                     beta: float = 0.5) -> Tensor:
    """(B, A) per-token estimates of the divergence from the student's sampled tokens: for
    ``reverse_kl`` log S − log T, for ``jsd`` β·ρ·log(ρ/m) − (1−β)·log m (module docstring).
    Their mean over the student's tokens estimates the divergence at those positions."""
    log_ratio = teacher_logp - student_logp
    if divergence == "reverse_kl":
        return -log_ratio
    if divergence == "jsd":
        log_m = log_mixture_ratio(log_ratio, beta)
        return beta * log_ratio.exp() * (log_ratio - log_m) - (1 - beta) * log_m
    raise ValueError(f"divergence {divergence!r}: expected one of {', '.join(DIVERGENCES)}")


def token_advantage(student_logp: Tensor, teacher_logp: Tensor, divergence: str = "reverse_kl",
                    beta: float = 0.5) -> Tensor:
    """(B, A) the per-token advantage whose policy gradient lowers that divergence: log T − log S
    for ``reverse_kl``, (1−β)·log(β·ρ + 1 − β) for ``jsd`` (module docstring)."""
    log_ratio = teacher_logp - student_logp
    if divergence == "reverse_kl":
        return log_ratio
    if divergence == "jsd":
        return (1 - beta) * log_mixture_ratio(log_ratio, beta)
    raise ValueError(f"divergence {divergence!r}: expected one of {', '.join(DIVERGENCES)}")


def distill_advantages(student_logp: Tensor, teacher_logp: Tensor, mask: Tensor, divergence: str = "reverse_kl",
                       beta: float = 0.5, discount: float = 0.0) -> Tensor:
    """(B, A) advantages over the (B, A) sampled-token ``mask``: each token's
    :func:`token_advantage` plus ``discount``^k times the one k sampled tokens later (0: its own
    alone; 1: the sum to the end). Zero off the mask; masked positions (padding, an episode's
    observation tokens) are never read, and a hole in the mask is no step."""
    m = mask.bool()
    per_token = zero_padding(token_advantage(zero_padding(student_logp, m), zero_padding(teacher_logp, m),
                                             divergence, beta), m)
    if discount == 0:
        return per_token
    return gae_advantages(per_token, torch.zeros_like(per_token), mask, discount, 1.0)[0]


def _check_beta(beta: float) -> None:
    if not 0 < beta < 1:
        raise ValueError(f"jsd beta {beta}: expected a number strictly between 0 and 1")
