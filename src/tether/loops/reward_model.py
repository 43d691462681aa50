"""Stage 2: a Bradley-Terry reward model, a scalar head on the SFT backbone.

Loss −log σ(r_chosen − r_rejected − m) (Ouyang et al. 2022 eq. 1; margin m from Touvron et
al. 2023 sec. 3.2.2). The score is read at the last real token of prompt+response. After
training, the mean score of held-out responses is stored as ``config.score_offset`` and
subtracted by tether's reward role: BT only identifies rewards up to a constant (the gauge).
"""

from __future__ import annotations

import logging
import time

import torch

from tether.distributed import all_gather_objects
from tether.distributed.shard import strided
from tether.algos import bradley_terry_loss
from tether.config import RewardModelConfig
from tether.data import collate_right, load_records, preference_examples, tokenize_preference
from tether.errors import DataError
from tether.loops.common import (
    LengthLimit,
    begin_run,
    data_limit,
    log_data_counts,
    notice,
    save_final,
    steps_for,
)
from tether.cards import model_card
from tether.loops.supervised import SupervisedJob, sequence_tokens, train_supervised
from tether.loops.sft import optimizer_spec, split_holdout
from tether.metrics import MetricsLogger
from tether.engines import TrainingEngine, engine_settings, prepare_models
from tether.models import load_scalar_model, load_tokenizer
from tether.models.loading import check_scalar_head_config, load_model_config
from tether.models.lora import trainable
from tether.models.forward import last_token_scores
from tether.runs import guarded_run, prepare_run_dir
from tether.types import to_device

log = logging.getLogger(__name__)


def pair_scores(model, pairs: list, pad_id: int, autocast: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Raw scores (B,), (B,) of chosen and rejected, in one forward over 2B sequences."""
    seqs = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
    batch = to_device(collate_right(seqs, pad_id), next(model.parameters()).device)
    scores = last_token_scores(model, batch["input_ids"], batch["attention_mask"], autocast)
    return scores[: len(pairs)], scores[len(pairs) :]


def load_pairs(cfg: RewardModelConfig, tokenizer, limit: LengthLimit | None = None):
    """Tokenized train pairs, their margins, eval pairs and counts; ``limit``: data.max_length fitted to the
    model. ``cfg``: the reward-model stage's config, or DPO's (the same data block)."""
    data = cfg.data
    limit = limit or LengthLimit(data.max_length)

    def read(source, split, key):
        records = load_records(source, split, key=key)
        examples, counts = preference_examples(records, cfg.on_identical)
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


@torch.no_grad()
def evaluate_pairs(model, pairs: list, pad_id: int, batch_size: int, offset: float = 0.0,
                   autocast: str = "none") -> dict:
    """Held-out pairwise accuracy, mean margin r_c − r_r, and the mean response score."""
    was_training = model.training
    model.eval()
    chosen, rejected = [], []
    mine = strided(pairs)  # data parallel: each rank scores its share, the scores are gathered
    for start in range(0, len(mine), batch_size):
        c, r = pair_scores(model, mine[start : start + batch_size], pad_id, autocast)
        chosen.append(c.float().cpu())
        rejected.append(r.float().cpu())
    model.train(was_training)
    empty = torch.zeros(0)
    shares = all_gather_objects((torch.cat(chosen) if chosen else empty, torch.cat(rejected) if rejected else empty))
    c, r = torch.cat([s[0] for s in shares]), torch.cat([s[1] for s in shares])
    return {
        "eval/accuracy": float((c > r).float().mean()),
        "eval/margin": float((c - r).mean()),
        "eval/score_mean": float(torch.cat([c, r]).mean()) - offset,
        "eval/loss": float(bradley_terry_loss(c, r)),
    }


def rm_inputs(cfg: RewardModelConfig):
    """Everything the reward-model stage reads before the weights, checked: (tokenizer, the
    model's config, :func:`load_pairs`' result). ``tether rm --dry-run`` stops here."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    config = load_model_config(cfg.model.name_or_path, "model.name_or_path", cfg.model.trust_remote_code)
    check_scalar_head_config(config, cfg.model.name_or_path, "model.name_or_path")
    return tokenizer, config, load_pairs(cfg, tokenizer, data_limit(cfg, {cfg.model.name_or_path: config}))


@guarded_run
def run_reward_model(cfg: RewardModelConfig, resume: bool = False) -> dict:
    """Train the RM, store the normalisation offset, save ``run.out``; return final metrics."""
    ckpt = begin_run(cfg, "rm", resume)
    settings = engine_settings(cfg)
    tokenizer, config, (train, margins, evals, counts) = rm_inputs(cfg)
    limits = {"data.max_length": data_limit(cfg, {cfg.model.name_or_path: config})}  # config.yaml, the card
    # The head is new when starting from the SFT model (a causal LM); a trained one is kept.
    # A LoRA checkpoint holds the adapters (and the head) alone: the base comes from the config.
    full = ckpt is not None and not cfg.lora.enabled
    model = load_scalar_model(
        str(ckpt / "model") if full else cfg.model.name_or_path, tokenizer, cfg.model.dtype,
        cfg.keep_dropout, head_init_std=cfg.head_init_std, new_head=not full,
        trust_remote_code=cfg.model.trust_remote_code, key=None if full else "model.name_or_path",
    )
    total_steps = steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    prepare_models([model], settings)
    model = trainable(model, cfg.lora, ckpt / "model" if ckpt and cfg.lora.enabled else None,
                      cfg.gradient_checkpointing, scalar=True)
    engine = TrainingEngine(model, optimizer_spec(cfg.optim, total_steps), settings.device, settings.precision,
                            settings.on_nonfinite, strategy=cfg.distributed.strategy)
    engine.config.score_offset = 0.0
    out = prepare_run_dir(cfg.run.out, cfg, "rm", cfg.run.overwrite, resume=ckpt is not None, limits=limits)
    if ckpt is None:
        log_data_counts(out, "rm", {"train_pairs": len(train), "eval_pairs": len(evals), **counts})
    pad, autocast = tokenizer.pad_token_id, engine.autocast

    def loss(module, items):
        c, r = pair_scores(module, [train[i] for i in items], pad, autocast)
        margin = engine.to_device(torch.tensor([margins[i] for i in items])) if cfg.margin_field else None
        value = bradley_terry_loss(c, r, margin)
        return value, {"train/loss": float(value.detach()), "train/accuracy": float((c > r).float().mean())}

    def evaluate() -> dict:
        return engine.infer(evaluate_pairs, evals, pad, cfg.optim.batch_size, 0.0, autocast)

    job = SupervisedJob(stage="rm", engine=engine, tokenizer=tokenizer, train=list(range(len(train))), loss=loss,
                        evaluate=evaluate if evals else None, tokens_of=lambda i: sequence_tokens(train[i]))
    t0 = time.perf_counter()
    eval_metrics = train_supervised(job, cfg, out, total_steps, ckpt)
    if cfg.normalize and evals:
        # Gauge fix: held-out responses score 0 on average (mean-centering, reference text 001).
        engine.config.score_offset = eval_metrics["eval/score_mean"]
        with MetricsLogger(out, "rm") as logger:
            logger.log(total_steps, {"rm/score_offset": engine.config.score_offset})
    card = model_card(cfg, "rm", {**eval_metrics, "steps": total_steps, "score_offset": engine.config.score_offset},
                      out, role="reward", limits=limits)
    save_final(out, engine, tokenizer, {"stage": "rm", "steps": total_steps}, card)
    return {**eval_metrics, "steps": total_steps, "time_s": time.perf_counter() - t0,
            "score_offset": engine.config.score_offset, "engine": engine, "tokenizer": tokenizer}
