"""Online DPO's pair sums and loss with −inf / NaN log-probs on rows in no pair: the rows are
selected (``torch.where``), not multiplied by a 0/1 mask, so they reach neither value nor gradient."""

from __future__ import annotations

import pytest
import torch

from tether.algorithms.online_dpo import PairedDPOLoss, PairedExperience, pair_sums
from tether.roles.policy import PolicyOutput
from tether.types import Rollout

NAN, INF = float("nan"), float("inf")
# Two groups of 3. Group 0: chosen (row 0), rejected (row 2), row 1 in no pair. Group 1: no pair.
SIGN = torch.tensor([1, 0, -1, 0, 0, 0])
MASK = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 0], [1, 1]])
LOGP = torch.tensor([[-1.0, -1.0], [-0.3, -0.2], [-0.5, 0.0], [-0.1, -0.1], [-0.7, 0.0], [-0.2, -0.9]])
REF = torch.tensor([[-1.5, -1.5], [-0.4, -0.4], [-1.0, 0.0], [-0.2, -0.2], [-0.6, 0.0], [-0.3, -0.3]])
UNPAIRED = [1, 3, 4, 5]


def poisoned(x: torch.Tensor, value: float) -> torch.Tensor:
    """``x`` with every real token of the unpaired rows set to ``value``."""
    out = x.clone()
    out[UNPAIRED] = torch.where(MASK[UNPAIRED].bool(), torch.full_like(out[UNPAIRED], value), out[UNPAIRED])
    return out


def experience(logp, ref) -> PairedExperience:
    ids = torch.ones_like(MASK)
    rollout = Rollout(ids, ids, ids, MASK, torch.ones(6, dtype=torch.bool), ["p"] * 6, ["r"] * 6)
    z = torch.zeros(6, 2)
    return PairedExperience(rollout, logp.detach(), ref, None, torch.zeros(6), z, z, z,
                            pair_sign=SIGN, group_id=torch.arange(6) // 3)


def loss_and_grad(logp, ref):
    logp = logp.clone().requires_grad_(True)
    loss, _ = PairedDPOLoss(beta=0.5, group_size=3)(PolicyOutput(logp), experience(logp, ref))
    loss.backward()
    return loss.detach(), logp.grad


def test_pair_sums_by_hand():
    pc, pr, rc, rr, has = pair_sums(LOGP, REF, MASK, SIGN, 3)
    assert pc.tolist() == [-2.0, 0.0] and rc.tolist() == [-3.0, 0.0]
    assert pr.tolist() == [-0.5, 0.0] and rr.tolist() == [-1.0, 0.0] and has.tolist() == [True, False]


@pytest.mark.parametrize("value", [-INF, NAN, INF])
def test_nonfinite_unpaired_rows_change_nothing(value):
    clean = pair_sums(LOGP, REF, MASK, SIGN, 3)
    for sums in (pair_sums(poisoned(LOGP, value), REF, MASK, SIGN, 3),
                 pair_sums(LOGP, poisoned(REF, value), MASK, SIGN, 3)):
        for got, want in zip(sums, clean):
            assert torch.equal(got, want)
    want_loss, want_grad = loss_and_grad(LOGP, REF)
    loss, grad = loss_and_grad(poisoned(LOGP, value), poisoned(REF, value))
    assert torch.isfinite(loss) and bool(torch.isfinite(grad).all())
    assert torch.equal(loss, want_loss) and torch.equal(grad, want_grad)
    # The unpaired rows get no gradient; the pair's rows do.
    assert not bool(grad[UNPAIRED].any()) and bool(grad[[0, 2]].any())
