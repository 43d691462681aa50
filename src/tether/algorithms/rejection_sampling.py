"""Rejection-sampling fine-tuning (Touvron et al. 2023, Llama 2 sec. 3.2.3; Dong et al. 2023,
RAFT): every iteration (a round) samples ``group.size`` = N responses per prompt from the
current policy, the reward source scores them, and the best ``selection.keep`` of each prompt
(:func:`~tether.algos.selection.best_of_group`, optionally above ``selection.min_score``) become
supervised targets: ``rl.epochs`` passes of the negative log-likelihood over the winners'
response tokens. It distils best-of-N into the policy while staying on its own samples.

The KL to the reference acts as in the other critic-free algorithms: with ``kl.placement=reward``
winners are ranked by score − β·Σ_t KL_t (``kl.coef: 0`` ranks by the score alone, as RAFT
does); with ``kl.placement=loss`` the loss adds β × the winners' token-mean KL estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from tether.algorithms.clipped import CriticFree, rollout_ratio_stats
from tether.algos import kl_estimate
from tether.algos.group import sequence_kl_penalty
from tether.algos.masked import zero_padding
from tether.algos.selection import best_of_group
from tether.types import Experience, Rollout


def winner_nll(logp: Tensor, winners: Tensor) -> Tensor:
    """−Σ w·log π / Σ w: the mean negative log-likelihood of the winners' response tokens.
    ``logp``: (B, A) log-probs; ``winners``: (B, A) 1 at a winner's response tokens, else 0."""
    w = winners.to(logp.dtype)
    return -(zero_padding(logp, winners.bool()) * w).sum() / w.sum().clamp(min=1)


@dataclass(frozen=True)
class WinnerNLLLoss:
    """:func:`winner_nll` (+ β × the winners' token-mean KL estimate with ``kl_in_loss``);
    micro-batches weigh by their winners' tokens."""

    kl_in_loss: bool
    kl_estimator: str
    kl_coef: float
    needs_entropy = False

    def micro_weight(self, mb: Experience) -> float:
        return float(mb.advantages.sum())

    def __call__(self, out, mb: Experience) -> tuple[Tensor, dict]:
        logp, winners = out.logprobs, mb.advantages.to(out.logprobs.device)
        loss = nll = winner_nll(logp, winners)
        stats = {}
        w = winners.bool()
        if self.kl_in_loss:
            kl = kl_estimate(zero_padding(logp, w), zero_padding(mb.ref_logprobs, w), self.kl_estimator)
            kl_term = (zero_padding(kl, w)).sum() / winners.sum().clamp(min=1)
            loss = loss + self.kl_coef * kl_term
            stats["ppo/policy/kl_loss"] = float(kl_term.detach())
        stats.update(rollout_ratio_stats(logp, mb.logprobs, mb.rollout.loss_mask.to(logp.device), winners))
        stats["ppo/policy/loss"] = float(nll.detach())
        return loss, stats


class RejectionSampling(CriticFree):
    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        mask = rollout.loss_mask.to(logprobs.device)
        kl, beta = self.kl_in_reward(logprobs, ref_logprobs, kl_coef)
        shaped = sequence_kl_penalty(scores, kl, mask, beta)
        sel = self.cfg.selection
        won = best_of_group(shaped, self.samples_per_prompt, sel.keep, sel.min_score)
        winners = zero_padding(won.to(logprobs.dtype)[:, None].expand_as(logprobs), mask)
        lengths = rollout.lengths.to(logprobs.device)
        stats = {"objective/non_score_reward": float((shaped - scores.float()).mean()),
                 "selection/kept": float(won.float().mean()),
                 "selection/winner_score": float(scores.float()[won].mean()) if won.any() else 0.0,
                 # A response length, as response/length_mean: every response token (observations too).
                 "selection/winner_length": float(lengths[won].float().mean()) if won.any() else 0.0}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, winners, winners, winners), stats

    def actor_loss(self, kl_coef: float) -> WinnerNLLLoss:
        return WinnerNLLLoss(kl_in_loss=self.cfg.kl.placement == "loss", kl_estimator=self.cfg.kl.estimator,
                             kl_coef=kl_coef)
