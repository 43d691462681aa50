"""DPO (and IPO): the policy trained on preference pairs directly, with no reward model and no
RL loop (Rafailov et al. 2023). The pairs are the reward-model stage's files.

The reference's summed log-probs of the chosen and rejected responses are computed once, before
the first step, for the training rows the run's steps will draw (all of them once a run spans an
epoch; a 5-step run on a large file scores only its 5 batches) and every held-out pair; a
separate reference model is then dropped (under LoRA the reference is the policy's base with its
adapters off, as in PPO). Each step scores chosen and rejected in one
forward of the policy. Held-out evaluation reports the implicit reward β·(log π − log π_ref):
its pairwise accuracy and margin, the numbers the reward-model stage reports for its explicit
reward.
"""

from __future__ import annotations

import math

import torch

from tether.algos.dpo import dpo_loss, implicit_rewards
from tether.config import DPOConfig
from tether.data import collate_left, collate_right
from tether.distributed import all_gather_objects
from tether.distributed.shard import rank_slice
from tether.engines import TrainingEngine, engine_settings, prepare_models
from tether.loops.common import batch_indices, data_limit, steps_for
from tether.objectives.reward_model import load_pairs
from tether.objectives.sft import trained_causal_lm
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_causal_lm, load_tokenizer
from tether.models.loading import load_model_config
from tether.roles.sources import check_reference_tokenizer
from tether.roles.policy import policy_forward
from tether.roles.builder import base_engine
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run
from tether.types import Rollout


def response_logprobs(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int,
                      autocast: str = "none") -> torch.Tensor:
    """(B,) summed log-probs of each response after its prompt under ``model`` (response tokens
    only), in one forward over B sequences (prompts left-padded, responses right-padded)."""
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = collate_left(prompts, pad_id)
    resp = collate_right(responses, pad_id)
    rollout = Rollout(prompt_ids.to(device), prompt_mask.to(device), resp["input_ids"].to(device),
                      resp["attention_mask"].to(device), ended=torch.ones(len(responses), dtype=torch.bool),
                      prompts=[""] * len(responses), responses=[""] * len(responses))
    out = policy_forward(model, rollout, 1.0, False, autocast)
    return (out.logprobs * rollout.response_mask).sum(dim=1)


def pair_logprobs(model, pairs: list, pad_id: int, autocast: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Summed response log-probs (B,), (B,) of each pair's chosen and rejected response under
    ``model``, in one forward over 2B sequences."""
    responses = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    sums = response_logprobs(model, [p.prompt_ids for p in pairs] * 2, responses, pad_id, autocast)
    return sums[: len(pairs)], sums[len(pairs):]


@torch.no_grad()
def pair_logprob_table(model, pairs: list, pad_id: int, batch_size: int, autocast: str = "none",
                       scorer=None) -> torch.Tensor:
    """(N, 2) summed log-probs (chosen, rejected) of every pair under ``model`` (the reference, or
    the policy when evaluating); under data parallel each rank
    scores a contiguous share and the shares are gathered in rank order. ``scorer(model, rows,
    pad_id, autocast)``: another per-row scorer returning K (B,) columns (default
    :func:`pair_logprobs`); the table is then (N, K)."""
    scorer = scorer or pair_logprobs
    was_training = model.training
    model.eval()
    mine = pairs[rank_slice(len(pairs))]
    parts = []
    for start in range(0, len(mine), batch_size):
        columns = scorer(model, mine[start: start + batch_size], pad_id, autocast)
        parts.append(torch.stack(list(columns), dim=1).float().cpu())
    model.train(was_training)
    share = torch.cat(parts) if parts else None
    shares = all_gather_objects(share)
    width = next((s.shape[1] for s in shares if s is not None), 2)  # a rank may have no rows
    return torch.cat([s if s is not None else torch.zeros(0, width) for s in shares])


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


def reference_of(cfg: DPOConfig, engine: TrainingEngine, tokenizer, settings, *pair_sets: list,
                 scorer=None) -> list[torch.Tensor]:
    """(N, 2) reference log-probs of each list of pairs: under the policy's base with its adapters
    off (LoRA and no ``reference``), or a frozen model loaded for the purpose and dropped after.
    ``scorer``: as :func:`pair_logprob_table`'s (KTO's rows)."""
    pad, batch = tokenizer.pad_token_id, cfg.optim.batch_size
    if cfg.lora.enabled and not cfg.reference:
        base = base_engine(engine)
        return [base.infer(pair_logprob_table, pairs, pad, batch, engine.autocast, scorer) for pairs in pair_sets]
    reference = load_causal_lm(cfg.reference or cfg.model.name_or_path, tokenizer, cfg.model.dtype,
                               trust_remote_code=cfg.model.trust_remote_code,
                               key="reference" if cfg.reference else "model.name_or_path",
                               attn_implementation=cfg.model.attn_implementation)
    prepare_models([reference], settings)
    reference.to(engine.device)
    return [pair_logprob_table(reference, pairs, pad, batch, engine.autocast, scorer) for pairs in pair_sets]


def rows_used(n: int, batch_size: int, total_steps: int, seed: int) -> list[int]:
    """The training rows (sorted) that ``total_steps`` steps draw: data order is a pure function of
    (seed, step), so they are known before the first step; every row once the run spans an epoch.
    A resumed run finds the same rows, so its reference log-probs are computed over the same
    batches and are bitwise those of the uninterrupted run."""
    steps = min(total_steps, math.ceil(n / batch_size))  # the first epoch draws every row
    return sorted({i for idx in batch_indices(n, batch_size, steps, seed) for i in idx.tolist()})


def reference_table(cfg: DPOConfig, engine: TrainingEngine, tokenizer, settings, train: list, evals: list,
                    total_steps: int, scorer=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 2) reference log-probs of the training pairs, NaN in the rows the run never draws
    (a NaN reaching a loss would stop the run, never train it), and (M, 2) of the held-out pairs.
    ``scorer``: as :func:`pair_logprob_table`'s (KTO's rows)."""
    used = rows_used(len(train), cfg.optim.batch_size, total_steps, cfg.run.seed)
    scored, ref_eval = reference_of(cfg, engine, tokenizer, settings, [train[i] for i in used], evals, scorer=scorer)
    ref_train = torch.full((len(train), scored.shape[1]), float("nan"))
    ref_train[torch.tensor(used, dtype=torch.long)] = scored
    return ref_train, ref_eval


def policy_and_reference(cfg):
    """(tokenizer, the policy's and any separate ``reference``'s configs by path), checked: what DPO
    and KTO read of their models before the weights."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    models = {cfg.model.name_or_path: load_model_config(cfg.model.name_or_path, "model.name_or_path",
                                                        cfg.model.trust_remote_code)}
    if cfg.reference:
        check_reference_tokenizer(cfg, tokenizer)  # as the RL commands check theirs
        models[cfg.reference] = load_model_config(cfg.reference, "reference", cfg.model.trust_remote_code)
    return tokenizer, models


def dpo_inputs(cfg: DPOConfig):
    """Everything DPO reads before the weights, checked: (tokenizer, the models' configs by path,
    :func:`load_pairs`' result). ``tether dpo --dry-run`` stops here."""
    tokenizer, models = policy_and_reference(cfg)
    return tokenizer, models, load_pairs(cfg, tokenizer, data_limit(cfg, models))


def dpo_stage_inputs(cfg: DPOConfig) -> StageInputs:
    """:func:`dpo_inputs` as the skeleton takes them, the limits fitted to the policy and the reference."""
    tokenizer, configs, (train, _, evals, counts) = dpo_inputs(cfg)
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, configs)})


def build_dpo_roles(cfg: DPOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """DPO's policy role, built where it runs: the policy through the trained-model builder, the
    reference's log-probs of the pairs the run will draw (:func:`reference_table`, before the
    first step), the loss over training pairs and the implicit reward's held-out evaluation."""
    inputs = inputs or dpo_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg)
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
