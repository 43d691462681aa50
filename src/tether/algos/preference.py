"""Preference losses beyond DPO: the reference-free SimPO and ORPO, and KTO on unpaired
thumbs-up / thumbs-down rows. Pure functions of per-response log-probs; (B,) tensors throughout.

- **SimPO** (Meng et al. 2024, eq. 6): the implicit reward is the policy's length-normalised
  log-probability, β/|y|·log π(y|x), with no reference model; a target margin γ separates the
  chosen from the rejected: −log σ(β·(ℓ_c/|y_c| − ℓ_r/|y_r|) − γ).
- **ORPO** (Hong et al. 2024, eqs. 4–7): supervised NLL on the chosen response plus λ times the
  log odds ratio term −log σ(log odds(y_c) − log odds(y_r)), where odds(y) = P/(1 − P) with
  P = exp(mean token log-prob); no reference model. Two deviations from the paper:
  (1) :func:`log_odds` clamps the mean log-prob at −1e-7 (P ≤ 1 − 1e-7, so log odds ≤ ~16.1):
  at P = 1 the paper's odds are infinite and its term NaN; a response above the clamp has a
  fixed log odds and no gradient through it. (2) The NLL term that ``orpo_loss`` is given is,
  in tether's ORPO loop, the token mean over all the batch's chosen tokens (as SFT's loss, exact
  under gradient accumulation), where the paper's eq. 2 takes each response's token mean and
  then the mean over responses: a long chosen response weighs more here.
- **KTO** (Ethayarajh et al. 2024, eq. 8): with r = log π(y|x) − log π_ref(y|x) (summed) and a
  reference point z₀ (a KL estimate, no gradient, at least 0), a desirable response costs
  λ_D·(1 − σ(β·(r − z₀))) and an undesirable one λ_U·(1 − σ(β·(z₀ − r))); the loss is their mean.
  z₀ is estimated on mismatched pairs (each prompt with another row's response), as the paper does.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def simpo_loss(chosen_logps: torch.Tensor, rejected_logps: torch.Tensor, chosen_lengths: torch.Tensor,
               rejected_lengths: torch.Tensor, beta: float, gamma: float) -> torch.Tensor:
    """Mean SimPO loss over (B,) pairs: summed response log-probs and response lengths in tokens."""
    margin = beta * (chosen_logps.float() / chosen_lengths.float() - rejected_logps.float() / rejected_lengths.float())
    return -F.logsigmoid(margin - gamma).mean()


def log_odds(mean_logps: torch.Tensor) -> torch.Tensor:
    """(B,) log(P / (1 − P)) for P = exp(``mean_logps``) (< 0), computed without cancelling:
    log(1 − P) is ``log(-expm1(x))`` near 0 and ``log1p(-exp(x))`` below −log 2."""
    x = mean_logps.float().clamp(max=-1e-7)  # P = 1 has infinite odds: keep the term finite
    log_one_minus = torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))
    return x - log_one_minus


def orpo_loss(chosen_mean_logps: torch.Tensor, rejected_mean_logps: torch.Tensor, chosen_nll: torch.Tensor,
              lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(ORPO's loss, its odds-ratio term): ``chosen_nll`` (the chosen responses' mean token NLL, a
    scalar) + ``lam`` · mean over (B,) pairs of −log σ(log odds(y_c) − log odds(y_r)), with each
    response's mean token log-prob as input."""
    ratio_term = -F.logsigmoid(log_odds(chosen_mean_logps) - log_odds(rejected_mean_logps)).mean()
    return chosen_nll + lam * ratio_term, ratio_term


def kto_reference_point(policy_logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """KTO's z₀: max(0, mean(log π − log π_ref)) over (B,) mismatched (prompt, response) rows,
    without gradient."""
    return (policy_logps.float() - ref_logps.float()).mean().clamp(min=0).detach()


def kto_loss(policy_logps: torch.Tensor, ref_logps: torch.Tensor, desirable: torch.Tensor, reference_point,
             beta: float, desirable_weight: float = 1.0, undesirable_weight: float = 1.0) -> torch.Tensor:
    """Mean KTO loss over (B,) responses: summed log-probs under the policy and the reference,
    ``desirable`` (B,) bool (the row's label), ``reference_point`` z₀ (a scalar)."""
    r = policy_logps.float() - ref_logps.float()
    z0 = torch.as_tensor(reference_point, dtype=r.dtype, device=r.device)
    good = desirable_weight * (1 - torch.sigmoid(beta * (r - z0)))
    bad = undesirable_weight * (1 - torch.sigmoid(beta * (z0 - r)))
    return torch.where(desirable.bool(), good, bad).mean()
