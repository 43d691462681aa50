"""Stage 1: supervised fine-tuning on demonstrations, loss on response tokens only.

The prompt (formatted with the chat template) carries no loss: the model learns to answer,
not to imitate users (Ouyang et al. 2022, sec. 3.5).
"""

from __future__ import annotations

import logging

import torch

from tether.algos import sft_loss
from tether.config import SFTConfig
from tether.data import collate_right, load_records, sft_examples, tokenize_sft
from tether.distributed import all_reduce
from tether.distributed.shard import strided
from tether.engines import engine_settings
from tether.common.errors import DataError
from tether.loops.common import LengthLimit, data_limit, notice, steps_for
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_tokenizer
from tether.models.forward import sequence_logprobs
from tether.models.loading import load_model_config
from tether.objectives.shared import split_holdout, trained_causal_lm
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run
from tether.common.runtime import world_size
from tether.types import to_device

log = logging.getLogger(__name__)


def load_sft_data(cfg: SFTConfig, tokenizer, limit: LengthLimit | None = None):
    """Tokenized train and eval examples and their counts; ``limit``: data.max_length fitted to the model."""
    data = cfg.data
    limit = limit or LengthLimit(data.max_length)
    train = sft_examples(load_records(data.train, data.train_split, key="data.train"))
    if data.max_rows:
        train = train[: data.max_rows]
    if data.eval:
        evals = sft_examples(load_records(data.eval, data.eval_split, key="data.eval"))
    else:
        train, evals = split_holdout(train, data.eval_size, cfg.run.seed)

    def encode(examples):
        out = [
            tokenize_sft(ex, tokenizer, limit.tokens, cfg.model.chat_template, data.on_long, limit.capped_by)
            for ex in examples
        ]
        kept = [t for t in out if t is not None]
        return kept, {"dropped_long": len(out) - len(kept), "truncated_long": sum(t.truncated for t in kept)}

    train_tok, counts = encode(train)
    eval_tok, eval_counts = encode(evals)
    counts.update({f"eval_{k}": v for k, v in eval_counts.items()})
    if not train_tok:
        raise DataError(f"'{data.train}' (data.train): no usable training examples after tokenization"
                        + (f" to {limit.tokens} tokens ({limit.capped_by})." if limit.capped_by else "."))
    if limit.capped_by and (counts["dropped_long"] or counts["truncated_long"]):
        notice(f"{counts['truncated_long']} training examples truncated and {counts['dropped_long']} dropped at "
               f"{limit.tokens} tokens ({limit.capped_by}).")
    return train_tok, eval_tok, counts


def sft_inputs(cfg: SFTConfig):
    """Everything SFT reads before the weights, checked: (tokenizer, the model's config, train and
    eval examples, their counts). ``tether sft --dry-run`` stops here."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    config = load_model_config(cfg.model.name_or_path, "model.name_or_path", cfg.model.trust_remote_code)
    train, evals, counts = load_sft_data(cfg, tokenizer, data_limit(cfg, {cfg.model.name_or_path: config}))
    return tokenizer, config, train, evals, counts


def sft_stage_inputs(cfg: SFTConfig) -> StageInputs:
    """:func:`sft_inputs` as the skeleton takes them, with the limits ``config.yaml`` and the card report."""
    tokenizer, config, train, evals, counts = sft_inputs(cfg)
    limits = {"data.max_length": data_limit(cfg, {cfg.model.name_or_path: config})}
    return StageInputs(tokenizer, train, evals, counts, limits)


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


def build_sft_roles(cfg: SFTConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """SFT's policy role, built where it runs: the model (from ``checkpoint`` when resuming) through
    the trained-model builder, its loss over training rows and its held-out loss. ``inputs``: the
    stage's inputs when the loop holds them (this process); a Ray worker reads its own."""
    inputs = inputs or sft_stage_inputs(cfg)
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
        return {"eval/loss": engine.infer(evaluate_sft, evals, pad, cfg.optim.batch_size, autocast)}

    policy = SupervisedModel(engine, loss, evaluate if evals else None,
                             weight_of=lambda i: float(sum(train[i].loss_mask[1:])), name="sft loss")
    return StageRoles({"policy": policy})


SFT = StageBody(name="sft", role="policy", inputs=sft_stage_inputs, build=build_sft_roles,
                counted=("train_examples", "eval_examples"))


@guarded_run
def run_sft(cfg: SFTConfig, resume: bool = False) -> dict:
    """Train, evaluate, save ``run.out`` as a Hugging Face checkpoint; return final metrics.

    ``resume``: continue from the newest complete checkpoint in ``run.out`` (if any).
    """
    return run_stage(cfg, SFT, resume)


def plan_inputs(cfg):
    """SFT's inputs as its dry run reads them (:func:`tether.plan.dry_run.plan_supervised`)."""
    tokenizer, config, train, evals, counts = sft_inputs(cfg)
    return tokenizer, {cfg.model.name_or_path: config}, train, evals, counts
