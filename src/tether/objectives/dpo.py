"""DPO (and IPO): the policy trained on preference pairs directly, with no reward model and no
RL loop (Rafailov et al. 2023). The pairs are the reward-model stage's files.

The reference's summed log-probs of the chosen and rejected responses are computed once, before
the first step, for the training rows the run's steps will draw (all of them once a run spans an
epoch; a 5-step run on a large file scores only its 5 batches) and every held-out pair; a
separate reference model is then dropped (under LoRA the reference is the policy's base with its
adapters off, as in PPO): :func:`tether.objectives.shared.reference_table`. Each step scores
chosen and rejected in one forward of the policy. Held-out evaluation reports the implicit
reward β·(log π − log π_ref): its pairwise accuracy and margin, the numbers the reward-model
stage reports for its explicit reward.
"""

from __future__ import annotations

import torch

from tether.algos.dpo import dpo_loss, implicit_rewards
from tether.config import DPOConfig
from tether.engines import engine_settings
from tether.loops.common import data_limit, steps_for
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.objectives.shared import (
    load_pairs,
    pair_logprob_table,
    pair_logprobs,
    policy_and_reference,
    reference_table,
    trained_causal_lm,
)
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run


def dpo_inputs(cfg: DPOConfig):
    """Everything DPO reads before the weights, checked: (tokenizer, the models' configs by path,
    :func:`load_pairs`' result). ``tether dpo --dry-run`` stops here."""
    tokenizer, models = policy_and_reference(cfg)
    return tokenizer, models, load_pairs(cfg, tokenizer, data_limit(cfg, models))


def dpo_stage_inputs(cfg: DPOConfig) -> StageInputs:
    """:func:`dpo_inputs` as the skeleton takes them, the limits fitted to the policy and the reference."""
    tokenizer, configs, (train, _, evals, counts) = dpo_inputs(cfg)
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, configs)})


@torch.no_grad()
def evaluate_dpo(model, pairs: list, ref: torch.Tensor, pad_id: int, batch_size: int, beta: float,
                 kind: str = "sigmoid", label_smoothing: float = 0.0, autocast: str = "none") -> dict:
    """Held-out loss, and the implicit reward's pairwise accuracy, margin and means (``ref``: the
    pairs' (N, 2) reference log-probs)."""
    policy = pair_logprob_table(model, pairs, pad_id, batch_size, autocast)
    ref = ref.to(policy.device)
    chosen = implicit_rewards(policy[:, 0], ref[:, 0], beta)
    rejected = implicit_rewards(policy[:, 1], ref[:, 1], beta)
    return {
        "eval/loss": float(dpo_loss(policy[:, 0], policy[:, 1], ref[:, 0], ref[:, 1], beta, kind, label_smoothing)),
        "eval/accuracy": float((chosen > rejected).float().mean()),
        "eval/margin": float((chosen - rejected).mean()),
        "eval/chosen_reward": float(chosen.mean()),
        "eval/rejected_reward": float(rejected.mean()),
    }


def build_dpo_roles(cfg: DPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """DPO's policy role, built where it runs: the policy through the trained-model builder, the
    reference's log-probs of the pairs the run will draw (:func:`reference_table`, before the
    first step), the loss over training pairs and the implicit reward's held-out evaluation."""
    inputs = inputs or dpo_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg.run, cfg.model, cfg.cpu)
    pad, batch = tokenizer.pad_token_id, cfg.optim.batch_size
    engine = trained_causal_lm(cfg, tokenizer, checkpoint, total_steps, settings)
    autocast = engine.autocast
    ref_train, ref_eval = reference_table(cfg, engine, tokenizer, settings, train, evals, total_steps)
    beta, kind, smoothing = cfg.dpo.beta, cfg.dpo.loss, cfg.dpo.label_smoothing

    def loss(module, items):
        pc, pr = pair_logprobs(module, [train[i] for i in items], pad, autocast)
        ref = engine.to_device(ref_train[torch.tensor(items)])
        value = dpo_loss(pc, pr, ref[:, 0], ref[:, 1], beta, kind, smoothing)
        with torch.no_grad():
            chosen, rejected = implicit_rewards(pc, ref[:, 0], beta), implicit_rewards(pr, ref[:, 1], beta)
        return value, {"train/loss": float(value.detach()),
                       "train/accuracy": float((chosen > rejected).float().mean()),
                       "train/margin": float((chosen - rejected).mean())}

    def evaluate() -> dict:
        return engine.infer(evaluate_dpo, evals, ref_eval, pad, batch, beta, kind, smoothing, autocast)

    return StageRoles({"policy": SupervisedModel(engine, loss, evaluate if evals else None, name="dpo loss")})


DPO = StageBody(name="dpo", role="policy", inputs=dpo_stage_inputs, build=build_dpo_roles,
                counted=("train_pairs", "eval_pairs"))


@guarded_run
def run_dpo(cfg: DPOConfig, resume: bool = False) -> dict:
    """Train the policy with DPO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, DPO, resume)


def plan_inputs(cfg):
    """DPO's inputs as its dry run reads them (:func:`tether.plan.dry_run.plan_supervised`)."""
    tokenizer, configs, (train, _, evals, counts) = dpo_inputs(cfg)
    return tokenizer, configs, train, evals, counts
