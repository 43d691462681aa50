"""Direct preference optimisation: the policy's log-ratio to a frozen reference as an implicit
reward, trained with the Bradley-Terry (DPO) or squared (IPO) loss on preference pairs.

All inputs are (B,) summed response log-probs: the policy's and the reference's, of the chosen
and the rejected response. h = (log π(y_c) − log π_ref(y_c)) − (log π(y_r) − log π_ref(y_r)).

- DPO (Rafailov et al. 2023, eq. 7): −log σ(β·h); with label smoothing ε (the chance a label
  is wrong, "conservative DPO"): −(1 − ε)·log σ(β·h) − ε·log σ(−β·h).
- IPO (Azar et al. 2023, eq. 17): (h − 1/(2β))², which stops pushing once the log-ratio gap
  reaches 1/(2β) instead of driving it to infinity on deterministic preferences.
- The implicit reward of a response is β·(log π(y) − log π_ref(y)) (Rafailov et al. 2023, sec. 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def log_ratio_gap(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
                  ref_rejected: torch.Tensor) -> torch.Tensor:
    """(B,) h = (π_c − ref_c) − (π_r − ref_r), all summed log-probs."""
    return (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float, kind: str = "sigmoid", label_smoothing: float = 0.0) -> torch.Tensor:
    """The mean DPO (``kind="sigmoid"``) or IPO (``"ipo"``) loss over (B,) pairs."""
    h = log_ratio_gap(policy_chosen.float(), policy_rejected.float(), ref_chosen.float(), ref_rejected.float())
    if kind == "sigmoid":
        return (-(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)).mean()
    if kind == "ipo":
        return ((h - 1 / (2 * beta)) ** 2).mean()
    raise ValueError(f"unknown DPO loss {kind!r}; expected 'sigmoid' or 'ipo'")


def implicit_rewards(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """(B,) β·(log π(y) − log π_ref(y)): DPO's implicit reward of each response."""
    return beta * (policy_logps.float() - ref_logps.float())
