"""SimPO and ORPO: the policy trained on preference pairs with no reference model and no reward
model (:mod:`tether.algos.preference` holds the losses). The pairs are the reward-model stage's
files, read as DPO reads them.

Each step scores the chosen and rejected responses of a batch in one forward of the policy
(:func:`tether.objectives.dpo.pair_logprobs`): their summed log-probs, and their lengths in tokens.

- SimPO's implicit reward of a response is β·log π(y|x)/|y|.
- ORPO's is the log odds of its mean token probability; its loss adds the chosen responses'
  NLL, so it needs no SFT stage before it. That NLL is a token mean over the whole batch's chosen
  responses: each micro-batch divides its summed NLL by the batch's chosen tokens (counted in
  ``before_step``), so micro-batches, accumulation and data-parallel ranks give the batch's loss.

Held-out evaluation reports that reward's pairwise accuracy and margin, as DPO reports its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tether.algos.preference import log_odds, orpo_loss, simpo_loss
from tether.config import ORPOConfig, SimPOConfig
from tether.loops.common import data_limit, steps_for
from tether.objectives.dpo import pair_logprob_table, pair_logprobs
from tether.objectives.reward_model import load_pairs
from tether.objectives.sft import trained_causal_lm
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_tokenizer
from tether.models.loading import load_model_config
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.engines import engine_settings
from tether.runs import guarded_run

#: (B,) summed chosen and rejected log-probs, (B,) their lengths, the whole batch's
#: :class:`BatchCounts` -> (loss, (B,) chosen and rejected implicit rewards, extra stats). The loss
#: is weighed by its pairs' share of the batch (:class:`SupervisedModel`'s default ``weight_of``).
Objective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, "BatchCounts"], tuple]


@dataclass(frozen=True)
class BatchCounts:
    """What a term normalised by a count other than pairs needs of the whole batch (not of the
    micro-batch it is computed on): its pairs and its chosen responses' tokens."""

    pairs: int
    chosen_tokens: int

    @classmethod
    def of(cls, pairs: list) -> "BatchCounts":
        return cls(len(pairs), sum(len(p.chosen_ids) for p in pairs))


def batch_token_mean(summed: torch.Tensor, pairs_here: int, batch: BatchCounts) -> torch.Tensor:
    """A micro-batch's share of a token mean over the whole batch, as a per-pair loss: ``summed``
    (a scalar over this micro-batch's tokens) / the batch's tokens, times batch pairs / pairs here,
    so that weighing micro-batches by their pairs (accumulation, ranks) adds up to
    Σ_batch / tokens_batch exactly."""
    return summed / batch.chosen_tokens * (batch.pairs / pairs_here)


def lengths(pairs: list, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) token counts of each pair's chosen and rejected response."""
    chosen = torch.tensor([len(p.chosen_ids) for p in pairs], dtype=torch.float32, device=device)
    rejected = torch.tensor([len(p.rejected_ids) for p in pairs], dtype=torch.float32, device=device)
    return chosen, rejected


def simpo_objective(cfg: SimPOConfig) -> Objective:
    beta, gamma = cfg.simpo.beta, cfg.simpo.gamma

    def objective(pc, pr, lc, lr, batch: BatchCounts):
        loss = simpo_loss(pc, pr, lc, lr, beta, gamma)
        return loss, beta * pc.float() / lc, beta * pr.float() / lr, {}

    return objective


def orpo_objective(cfg: ORPOConfig) -> Objective:
    weight = cfg.orpo.odds_ratio_weight

    def objective(pc, pr, lc, lr, batch: BatchCounts):
        mean_c, mean_r = pc.float() / lc, pr.float() / lr
        # The chosen responses' token-mean NLL, as SFT's loss: over the batch's tokens, not these pairs'.
        nll = batch_token_mean(-pc.float().sum(), len(pc), batch)
        loss, ratio_term = orpo_loss(mean_c, mean_r, nll, weight)
        return loss, log_odds(mean_c), log_odds(mean_r), {"nll": nll, "odds_ratio_loss": ratio_term}

    return objective


def pair_inputs(cfg):
    """Everything SimPO and ORPO read before the weights, checked: (tokenizer, the policy's config by
    path, :func:`load_pairs`' result). Their ``--dry-run`` stops here."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    configs = {cfg.model.name_or_path: load_model_config(cfg.model.name_or_path, "model.name_or_path",
                                                         cfg.model.trust_remote_code)}
    return tokenizer, configs, load_pairs(cfg, tokenizer, data_limit(cfg, configs))


def pair_stage_inputs(cfg) -> StageInputs:
    """:func:`pair_inputs` as the skeleton takes them, the length limit fitted to the policy."""
    tokenizer, configs, (train, _, evals, counts) = pair_inputs(cfg)
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, configs)})


@torch.no_grad()
def evaluate_pairs(model, pairs: list, pad_id: int, batch_size: int, objective: Objective,
                   autocast: str = "none") -> dict:
    """Held-out loss, and the implicit reward's pairwise accuracy, margin and means."""
    table = pair_logprob_table(model, pairs, pad_id, batch_size, autocast)
    lc, lr = lengths(pairs, table.device)
    loss, chosen, rejected, extra = objective(table[:, 0], table[:, 1], lc, lr, BatchCounts.of(pairs))
    return {"eval/loss": float(loss), "eval/accuracy": float((chosen > rejected).float().mean()),
            "eval/margin": float((chosen - rejected).mean()), "eval/chosen_reward": float(chosen.mean()),
            "eval/rejected_reward": float(rejected.mean()), **{f"eval/{k}": float(v) for k, v in extra.items()}}


def build_pair_roles(cfg, objective: Objective, name: str, checkpoint=None, inputs: StageInputs | None = None,
                     total_steps: int | None = None) -> StageRoles:
    """The policy role of a reference-free preference stage: the policy through the trained-model
    builder, the ``objective`` over training pairs and its held-out evaluation."""
    inputs = inputs or pair_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    pad, batch = tokenizer.pad_token_id, cfg.optim.batch_size
    engine = trained_causal_lm(cfg, tokenizer, checkpoint, total_steps, engine_settings(cfg))
    autocast = engine.autocast
    step: dict = {}  # this batch's counts (every rank sees the whole batch's rows here)

    def before_step(rows: list[int]) -> None:
        step["batch"] = BatchCounts.of([train[i] for i in rows])

    def loss(module, items):
        rows = [train[i] for i in items]
        pc, pr = pair_logprobs(module, rows, pad, autocast)
        lc, lr = lengths(rows, pc.device)
        value, chosen, rejected, extra = objective(pc, pr, lc, lr, step["batch"])
        with torch.no_grad():
            stats = {"train/loss": float(value.detach()), "train/accuracy": float((chosen > rejected).float().mean()),
                     "train/margin": float((chosen - rejected).mean()),
                     **{f"train/{k}": float(v.detach()) for k, v in extra.items()}}
        return value, stats

    def evaluate() -> dict:
        return engine.infer(evaluate_pairs, evals, pad, batch, objective, autocast)

    return StageRoles({"policy": SupervisedModel(engine, loss, evaluate if evals else None, name=f"{name} loss",
                                                 before_step=before_step)})


def build_simpo_roles(cfg: SimPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                      total_steps: int | None = None) -> StageRoles:
    return build_pair_roles(cfg, simpo_objective(cfg), SIMPO.name, checkpoint, inputs, total_steps)


def build_orpo_roles(cfg: ORPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                     total_steps: int | None = None) -> StageRoles:
    return build_pair_roles(cfg, orpo_objective(cfg), ORPO.name, checkpoint, inputs, total_steps)


SIMPO = StageBody(name="simpo", role="policy", inputs=pair_stage_inputs, build=build_simpo_roles,
                  counted=("train_pairs", "eval_pairs"))
ORPO = StageBody(name="orpo", role="policy", inputs=pair_stage_inputs, build=build_orpo_roles,
                 counted=("train_pairs", "eval_pairs"))


@guarded_run
def run_simpo(cfg: SimPOConfig, resume: bool = False) -> dict:
    """Train the policy with SimPO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, SIMPO, resume)


@guarded_run
def run_orpo(cfg: ORPOConfig, resume: bool = False) -> dict:
    """Train the policy with ORPO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, ORPO, resume)
