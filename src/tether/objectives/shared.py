"""What several objectives share, so that no method module imports another.

- Rows: the held-out split (:func:`split_holdout`: SFT, the pairs, KTO), the preference pairs
  (:func:`load_pairs`: the reward model, DPO, SimPO, ORPO; the reward model's files), what the
  policy stages read before the weights (:func:`policy_and_reference`, :func:`pair_inputs`).
- The trained policy: :func:`trained_causal_lm` (SFT, DPO, SimPO, ORPO, KTO) and its optimiser
  (:func:`optimizer_spec`, also the reward model's); a causal LM trained on its examples' response
  tokens as the policy role (:func:`response_lm_roles`: SFT, the generative judge), with its loss
  (:func:`sft_batch_loss`) and held-out loss (:func:`evaluate_sft`).
- Forwards: a response's summed log-probs after its prompt (:func:`response_logprobs`), a pair's
  chosen and rejected in one forward (:func:`pair_logprobs`), a table of them over many rows
  (:func:`pair_logprob_table`).
- The reference pass (DPO, KTO): the reference's log-probs computed once, before the first step,
  for the training rows the run's steps draw (:func:`rows_used`) and every held-out row
  (:func:`reference_table`); under LoRA by the policy's base with its adapters off, otherwise by a
  frozen model loaded for that pass and dropped (:func:`reference_of`).
- The reference-free pair stages (SimPO, ORPO): each step scores a batch's chosen and rejected
  responses in one forward of the policy, their summed log-probs and their lengths in tokens, and
  hands them to the method's :data:`Objective` (:func:`build_pair_roles`); held-out evaluation
  reports its implicit reward's pairwise accuracy and margin, as DPO reports its own.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tether.algos import sft_loss
from tether.common.runtime import world_size
from tether.config import DPOConfig, RewardModelConfig
from tether.data import collate_left, collate_right, load_records, preference_examples, tokenize_preference
from tether.distributed import all_gather_objects, all_reduce
from tether.distributed.shard import rank_slice, strided
from tether.engines import OptimizerSpec, TrainingEngine, engine_settings, prepare_models
from tether.common.errors import DataError
from tether.loops.common import LengthLimit, batch_indices, data_limit, notice, steps_for
from tether.loops.stage import StageInputs
from tether.models.forward import sequence_logprobs
from tether.models import load_causal_lm, load_tokenizer
from tether.models.loading import load_model_config
from tether.roles.builder import base_engine, build_trained, resume_adapter, resume_source
from tether.roles.policy import policy_forward
from tether.roles.sources import check_reference_tokenizer
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.types import Rollout, to_device


# Rows.


def split_holdout(items: list, eval_size: int, seed: int) -> tuple[list, list]:
    """Hold out ``eval_size`` items chosen by ``seed`` (at most a fifth of the data)."""
    size = min(eval_size, len(items) // 5)
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    held = set(order[:size])
    return [x for i, x in enumerate(items) if i not in held], [items[i] for i in sorted(held)]


def load_pairs(cfg: RewardModelConfig, tokenizer, limit: LengthLimit | None = None):
    """Tokenized train pairs, their margins, eval pairs and counts; ``limit``: data.max_length fitted to the
    model. ``cfg``: the reward-model stage's config, or DPO's (the same data block)."""
    data = cfg.data
    limit = limit or LengthLimit(data.max_length)

    def read(source, split, key):
        records = load_records(source, split, key=key)
        # A teacher labels the pairs (reward-model distillation): tether pairs' unlabeled rows are read too.
        examples, counts = preference_examples(records, cfg.on_identical, unlabeled=bool(getattr(cfg, "teacher", None)))
        margins = None
        field = getattr(cfg, "margin_field", None)  # the RM stage's; DPO reads the same pairs without
        if field:
            by_row = {rec.row: rec for rec in records}
            margins = [_margin(by_row[ex.row], field) for ex in examples]
        return examples, counts, margins

    train, counts, margins = read(data.train, data.train_split, "data.train")
    if data.max_rows:
        train = train[: data.max_rows]
        margins = margins[: data.max_rows] if margins else None
    if data.eval:
        evals, _, _ = read(data.eval, data.eval_split, "data.eval")
    else:
        idx = list(range(len(train)))
        keep, held = split_holdout(idx, data.eval_size, cfg.run.seed)
        evals = [train[i] for i in held]
        margins = [margins[i] for i in keep] if margins else None
        train = [train[i] for i in keep]

    def encode(examples, margin_list):
        out, kept_margins = [], []
        for i, ex in enumerate(examples):
            tok = tokenize_preference(ex, tokenizer, limit.tokens, cfg.model.chat_template, data.on_long,
                                      limit.capped_by)
            if tok is not None:
                out.append(tok)
                kept_margins.append(margin_list[i] if margin_list else 0.0)
        return out, kept_margins, {"dropped_long": len(examples) - len(out),
                                   "truncated_long": sum(t.truncated for t in out)}

    train_tok, train_margins, train_counts = encode(train, margins)
    eval_tok, _, eval_counts = encode(evals, None)
    if not train_tok:
        raise DataError(f"'{data.train}' (data.train): no usable preference pairs after tokenization"
                        + (f" to {limit.tokens} tokens ({limit.capped_by})." if limit.capped_by else "."))
    if limit.capped_by and (train_counts["dropped_long"] or train_counts["truncated_long"]):
        notice(f"{train_counts['truncated_long']} training pairs truncated and {train_counts['dropped_long']} "
               f"dropped at {limit.tokens} tokens ({limit.capped_by}).")
    counts = {**counts, **train_counts, **{f"eval_{k}": v for k, v in eval_counts.items()}}
    return train_tok, train_margins, eval_tok, counts


def _margin(record, field: str) -> float:
    value = record.data.get(field)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(
            f"{record.source}, row {record.row}: field '{field}' (margin_field) = {value!r}; "
            "expected a number (the preference margin m)."
        )
    return float(value)


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


def pair_inputs(cfg):
    """Everything SimPO and ORPO read before the weights, checked: (tokenizer, the policy's config by
    path, :func:`load_pairs`' result). Their ``--dry-run`` stops here."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    configs = {cfg.model.name_or_path: load_model_config(cfg.model.name_or_path, "model.name_or_path",
                                                         cfg.model.trust_remote_code)}
    return tokenizer, configs, load_pairs(cfg, tokenizer, data_limit(cfg, configs))


def plan_inputs(cfg):
    """A reference-free pair stage's inputs (SimPO's, ORPO's) as its dry run reads them
    (:func:`tether.plan.dry_run.plan_supervised`)."""
    tokenizer, configs, (train, _, evals, counts) = pair_inputs(cfg)
    return tokenizer, configs, train, evals, counts


def pair_stage_inputs(cfg) -> StageInputs:
    """:func:`pair_inputs` as the skeleton takes them, the length limit fitted to the policy."""
    tokenizer, configs, (train, _, evals, counts) = pair_inputs(cfg)
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, configs)})


# The trained policy.


def optimizer_spec(opt, total_steps: int) -> OptimizerSpec:
    """AdamW and its schedule from an ``optim:`` block (SFT and the reward model)."""
    return OptimizerSpec.from_block(opt, total_steps)


def trained_causal_lm(cfg, tokenizer, checkpoint, total_steps: int, settings, keep_dropout: bool = False):
    """A supervised stage's trained policy: its checkpoint (or, resuming under LoRA, the base with
    the checkpoint's adapters), through the trained-model builder with the stage's optimiser,
    LoRA, gradient checkpointing and data-parallel strategy."""
    source, key = resume_source(cfg, checkpoint)  # a LoRA checkpoint holds the adapters alone
    model = load_causal_lm(source, tokenizer, cfg.model.dtype, keep_dropout, cfg.model.trust_remote_code, key=key,
                           attn_implementation=cfg.model.attn_implementation)
    return build_trained(model, optimizer_spec(cfg.optim, total_steps), settings, lora=cfg.lora,
                         adapter=resume_adapter(cfg, checkpoint), checkpointing=cfg.gradient_checkpointing,
                         strategy=cfg.distributed.strategy)


# Forwards.


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


# The reference pass.


def rows_used(n: int, batch_size: int, total_steps: int, seed: int) -> list[int]:
    """The training rows (sorted) that ``total_steps`` steps draw: data order is a pure function of
    (seed, step), so they are known before the first step; every row once the run spans an epoch.
    A resumed run finds the same rows, so its reference log-probs are computed over the same
    batches and are bitwise those of the uninterrupted run."""
    steps = min(total_steps, math.ceil(n / batch_size))  # the first epoch draws every row
    return sorted({i for idx in batch_indices(n, batch_size, steps, seed) for i in idx.tolist()})


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


# The reference-free pair stages (SimPO, ORPO).

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


def lengths(pairs: list, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(B,) token counts of each pair's chosen and rejected response."""
    chosen = torch.tensor([len(p.chosen_ids) for p in pairs], dtype=torch.float32, device=device)
    rejected = torch.tensor([len(p.rejected_ids) for p in pairs], dtype=torch.float32, device=device)
    return chosen, rejected


@torch.no_grad()
def evaluate_objective(model, pairs: list, pad_id: int, batch_size: int, objective: Objective,
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
    engine = trained_causal_lm(cfg, tokenizer, checkpoint, total_steps, engine_settings(cfg.run, cfg.model, cfg.cpu))
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
        return engine.infer(evaluate_objective, evals, pad, batch, objective, autocast)

    return StageRoles({"policy": SupervisedModel(engine, loss, evaluate if evals else None, name=f"{name} loss",
                                                 before_step=before_step)})


def sft_batch_loss(model, batch: dict, total_tokens: int, autocast: str = "none") -> torch.Tensor:
    """Sum of response-token NLL in ``batch`` divided by ``total_tokens`` of the full batch.

    Dividing by the whole batch's token count makes gradient accumulation exact. The forward
    runs under ``autocast`` (run.precision); the log-softmax in fp32.
    """
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    # The LM head in fp32 chunks of positions: never the whole [B, T, vocabulary] logits.
    logp = sequence_logprobs(model, ids, attn, autocast)
    target_mask = mask[:, 1:]
    return sft_loss(logp, target_mask) * target_mask.sum() / max(total_tokens, 1)


def evaluate_sft(model, examples, pad_id: int, batch_size: int, autocast: str = "none") -> float:
    """Held-out token-mean NLL of ``examples`` (call without gradients, e.g. through ``engine.infer``).
    Data parallel: each rank scores its share of the examples and the sums are added up."""
    total, count = sft_eval_sums(model, strided(examples), pad_id, batch_size, autocast)
    total, count = all_reduce([total, count], "sum") if world_size() > 1 else (total, count)
    return total / max(count, 1)


def sft_eval_sums(model, examples, pad_id: int, batch_size: int, autocast: str = "none") -> tuple[float, int]:
    """(summed response-token NLL, response tokens) of ``examples``."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = to_device(collate_right([t.input_ids for t in chunk], pad_id, [t.loss_mask for t in chunk]), device)
        n = int(batch["loss_mask"][:, 1:].sum())
        total += float(sft_batch_loss(model, batch, n, autocast)) * n
        count += n
    model.train(was_training)
    return total, count


def response_lm_roles(cfg, inputs: StageInputs, checkpoint=None, total_steps: int | None = None,
                      extra_eval: Callable | None = None) -> StageRoles:
    """A causal LM trained on its examples' response tokens (SFT; a generative judge's verdicts), as
    the ``policy`` role: the model (from ``checkpoint`` when resuming) through the trained-model
    builder, its loss over training rows and its held-out loss; ``extra_eval(engine, pad, autocast)
    -> dict``: more held-out metrics."""
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg.run, cfg.model, cfg.cpu)
    engine = trained_causal_lm(cfg, tokenizer, checkpoint, total_steps, settings, cfg.keep_dropout)
    pad, autocast = tokenizer.pad_token_id, engine.autocast

    def loss(module, rows):
        items = [train[i] for i in rows]
        batch = engine.to_device(collate_right([t.input_ids for t in items], pad, [t.loss_mask for t in items]))
        value = sft_batch_loss(module, batch, int(batch["loss_mask"][:, 1:].sum()), autocast)
        return value, {"train/loss": float(value.detach())}

    def evaluate() -> dict:
        out = {"eval/loss": engine.infer(evaluate_sft, evals, pad, cfg.optim.batch_size, autocast)}
        return {**out, **(extra_eval(engine, pad, autocast) if extra_eval is not None else {})}

    policy = SupervisedModel(engine, loss, evaluate if evals else None,
                             weight_of=lambda i: float(sum(train[i].loss_mask[1:])), name="sft loss")
    return StageRoles({"policy": policy})
