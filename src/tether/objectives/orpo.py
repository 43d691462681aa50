"""ORPO: the policy trained on preference pairs with no reference model and no reward model
(Hong et al. 2024; the loss in :mod:`tether.algos.preference`). The pairs are the reward-model
stage's files, read as DPO reads them.

A response's implicit reward is the log odds of its mean token probability. The loss adds the
chosen responses' NLL, so ORPO needs no SFT stage before it. That NLL is a token mean over the
whole batch's chosen responses: each micro-batch divides its summed NLL by the batch's chosen
tokens (counted in ``before_step``), so micro-batches, accumulation and data-parallel ranks give
the batch's loss. Each step scores a batch's chosen and rejected responses in one forward of the
policy (:func:`tether.objectives.shared.build_pair_roles`); held-out evaluation reports the
implicit reward's pairwise accuracy and margin, as DPO reports its own.
"""

from __future__ import annotations

import torch

from tether.algos.preference import log_odds, orpo_loss
from tether.config import ORPOConfig
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.objectives.shared import BatchCounts, Objective, build_pair_roles, pair_stage_inputs
from tether.roles.supervised import StageRoles
from tether.runs import guarded_run


def batch_token_mean(summed: torch.Tensor, pairs_here: int, batch: BatchCounts) -> torch.Tensor:
    """A micro-batch's share of a token mean over the whole batch, as a per-pair loss: ``summed``
    (a scalar over this micro-batch's tokens) / the batch's tokens, times batch pairs / pairs here,
    so that weighing micro-batches by their pairs (accumulation, ranks) adds up to
    Σ_batch / tokens_batch exactly."""
    return summed / batch.chosen_tokens * (batch.pairs / pairs_here)


def orpo_objective(cfg: ORPOConfig) -> Objective:
    weight = cfg.orpo.odds_ratio_weight

    def objective(pc, pr, lc, lr, batch: BatchCounts):
        mean_c, mean_r = pc.float() / lc, pr.float() / lr
        # The chosen responses' token-mean NLL, as SFT's loss: over the batch's tokens, not these pairs'.
        nll = batch_token_mean(-pc.float().sum(), len(pc), batch)
        loss, ratio_term = orpo_loss(mean_c, mean_r, nll, weight)
        return loss, log_odds(mean_c), log_odds(mean_r), {"nll": nll, "odds_ratio_loss": ratio_term}

    return objective


def build_orpo_roles(cfg: ORPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                     total_steps: int | None = None) -> StageRoles:
    return build_pair_roles(cfg, orpo_objective(cfg), ORPO.name, checkpoint, inputs, total_steps)


ORPO = StageBody(name="orpo", role="policy", inputs=pair_stage_inputs, build=build_orpo_roles,
                 counted=("train_pairs", "eval_pairs"))


@guarded_run
def run_orpo(cfg: ORPOConfig, resume: bool = False) -> dict:
    """Train the policy with ORPO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, ORPO, resume)
