"""Online DPO (Guo et al. 2024, "Direct Language Model Alignment from Online AI Feedback";
iterative DPO as in Xiong et al. 2024): every iteration samples k responses per prompt from the
current policy, the reward source ranks them, and the best and the worst make a DPO pair
(:func:`~tether.algos.selection.best_worst_pairs`) trained with DPO's loss against the frozen
reference, β = ``kl.coef`` (DPO's β is the KL coefficient of the objective it solves; an
adaptive ``kl.controller`` moves it towards ``kl.target``). No critic, no advantages: the
reward only orders a prompt's samples, so its scale does not matter.

The loss needs both responses of a pair in one micro-batch: the registry entry's
``whole_groups`` makes the update shuffle whole groups, and :meth:`PairedDPOLoss.__call__`
checks that every micro-batch (every rank's share under data parallel) holds whole groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tether.algorithms.clipped import rollout_ratio_stats
from tether.algos.dpo import log_ratio_gap
from tether.algos.masked import zero_padding
from tether.algos.selection import CHOSEN, REJECTED, best_worst_pairs
from tether.common.errors import TrainingError
from tether.types import Experience, Rollout


@dataclass
class PairedExperience(Experience):
    """An :class:`Experience` whose rows are paired within their prompt's group.

    ``pair_sign``: (B,) long, +1 chosen, −1 rejected, 0 in no pair. ``group_id``: (B,) long, the
    prompt group each row belongs to (rows of one group are consecutive)."""

    pair_sign: Tensor | None = None
    group_id: Tensor | None = None


def pair_sums(logp: Tensor, ref_logp: Tensor, mask: Tensor, sign: Tensor, group_size: int) -> tuple[Tensor, ...]:
    """(B, A) log-probs of the policy and the reference, (B, A) sampled-token mask, (B,) pair signs ->
    (G,) summed response log-probs of each group's chosen and rejected response (policy chosen,
    policy rejected, reference chosen, reference rejected; 0 in a group without a pair) and (G,)
    whether the group has a pair.

    Rows are picked with ``torch.where``, not multiplied by a 0/1 mask: a row in no pair may
    hold −inf or NaN log-probs (−inf·0 = NaN), and neither its value nor its gradient (0) may
    reach the pair's sums."""
    m = mask.bool()
    seq = zero_padding(logp, m).sum(1).reshape(-1, group_size)
    ref = zero_padding(ref_logp, m).sum(1).reshape(-1, group_size)
    s = sign.reshape(-1, group_size)

    def pick(x: Tensor, which: int) -> Tensor:
        return zero_padding(x, s == which).sum(1)

    return pick(seq, CHOSEN), pick(seq, REJECTED), pick(ref, CHOSEN), pick(ref, REJECTED), (s == CHOSEN).any(dim=1)


@dataclass(frozen=True)
class PairedDPOLoss:
    """The mean of −log σ(β·h) over the micro-batch's pairs, h the DPO log-ratio gap
    (:func:`~tether.algos.dpo.log_ratio_gap`); micro-batches weigh by their pairs."""

    beta: float
    group_size: int
    needs_entropy = False

    def micro_weight(self, mb: PairedExperience) -> float:
        return float((mb.pair_sign == CHOSEN).sum())

    def __call__(self, out, mb: PairedExperience) -> tuple[Tensor, dict]:
        logp, mask = out.logprobs, mb.rollout.loss_mask.to(out.logprobs.device)
        groups = mb.group_id.reshape(-1, self.group_size) if len(mb.group_id) % self.group_size == 0 else None
        if groups is None or bool((groups != groups[:, :1]).any()):
            raise TrainingError(
                f"Online DPO got a micro-batch of {len(mb.group_id)} rows that splits a prompt's group of "
                f"{self.group_size}: each rank's share of a micro-batch (rl.minibatch_size / rl.grad_accum_steps, "
                "divided over the data-parallel ranks) must be a multiple of group.size.")
        pc, pr, rc, rr, has_pair = pair_sums(logp, mb.ref_logprobs, mask, mb.pair_sign.to(logp.device),
                                             self.group_size)
        h = log_ratio_gap(pc.float(), pr.float(), rc.float(), rr.float())
        per_pair = -F.logsigmoid(self.beta * h)
        pairs = int(has_pair.sum())
        loss = (per_pair * has_pair).sum() / max(pairs, 1)  # no pair here: a zero loss with a graph (DDP)
        valid = h.detach()[has_pair]
        # Stats weighed as the loss is (by pairs): each paired row's tokens by 1 / its length.
        in_pair = (mb.pair_sign != 0).to(logp.device)[:, None] * mask
        per_row = in_pair / mask.sum(1, keepdim=True).clamp(min=1)
        return loss, {**rollout_ratio_stats(logp, mb.logprobs, mask, per_row), "ppo/policy/loss": float(loss.detach()),
                      "pairs/accuracy": float((valid > 0).float().mean()) if pairs else 0.0,
                      "pairs/margin": float(self.beta * valid.mean()) if pairs else 0.0}


class OnlineDPO:
    def __init__(self, cfg):
        self.cfg = cfg
        self.samples_per_prompt = cfg.samples_per_prompt

    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        g = self.samples_per_prompt
        sign = best_worst_pairs(scores, g).to(logprobs.device)
        group_id = torch.arange(len(scores), device=logprobs.device) // g
        zeros = torch.zeros_like(logprobs)
        s, signs = scores.float().reshape(-1, g), sign.reshape(-1, g).to(scores.device)
        paired = (signs == CHOSEN).any(dim=1)
        zero = torch.zeros((), device=s.device)
        # The pair's own two scores (a NaN score is in no pair: selected, never multiplied in).
        gap = (torch.where(signs == CHOSEN, s, zero).sum(1) - torch.where(signs == REJECTED, s, zero).sum(1))[paired]
        stats = {"pairs/fraction": float(paired.float().mean()),
                 "pairs/score_gap": float(gap.mean()) if len(gap) else 0.0}
        return PairedExperience(rollout, logprobs, ref_logprobs, None, scores, zeros, zeros, zeros,
                                pair_sign=sign, group_id=group_id), stats

    def actor_loss(self, kl_coef: float) -> PairedDPOLoss:
        return PairedDPOLoss(beta=kl_coef, group_size=self.samples_per_prompt)

    def critic_loss(self):
        return None
