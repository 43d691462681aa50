"""Stage 1: supervised fine-tuning on demonstrations, loss on response tokens only.

The prompt (formatted with the chat template) carries no loss: the model learns to answer,
not to imitate users (Ouyang et al. 2022, sec. 3.5).
"""

from __future__ import annotations

import logging
import random
import time

import torch

from tether.algos import sft_loss, token_logprobs
from tether.config import SFTConfig
from tether.data import collate_right, load_records, sft_examples, tokenize_sft
from tether.errors import DataError
from tether.loops.common import (
    batch_indices,
    check_finite,
    grad_norm_and_clip,
    make_optimizer,
    make_scheduler,
    progress,
    save_final,
    steps_for,
)
from tether.metrics import MetricsLogger
from tether.models import load_causal_lm, load_tokenizer
from tether.models.forward import position_ids
from tether.runs import prepare_run_dir, seed_everything, set_threads

log = logging.getLogger(__name__)


def split_holdout(items: list, eval_size: int, seed: int) -> tuple[list, list]:
    """Hold out ``eval_size`` items chosen by ``seed`` (at most a fifth of the data)."""
    size = min(eval_size, len(items) // 5)
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    held = set(order[:size])
    return [x for i, x in enumerate(items) if i not in held], [items[i] for i in sorted(held)]


def load_sft_data(cfg: SFTConfig, tokenizer):
    data = cfg.data
    train = sft_examples(load_records(data.train, data.train_split))
    if data.max_rows:
        train = train[: data.max_rows]
    if data.eval:
        evals = sft_examples(load_records(data.eval, data.eval_split))
    else:
        train, evals = split_holdout(train, data.eval_size, cfg.run.seed)

    def encode(examples):
        out = [
            tokenize_sft(ex, tokenizer, data.max_length, cfg.model.chat_template, data.on_long)
            for ex in examples
        ]
        return [t for t in out if t is not None], sum(t is None for t in out)

    train_tok, dropped = encode(train)
    eval_tok, _ = encode(evals)
    if not train_tok:
        raise DataError(f"'{data.train}': no usable training examples after tokenization.")
    return train_tok, eval_tok, dropped


def sft_batch_loss(model, batch: dict, total_tokens: int) -> torch.Tensor:
    """Sum of response-token NLL in ``batch`` divided by ``total_tokens`` of the full batch.

    Dividing by the whole batch's token count makes gradient accumulation exact.
    """
    ids, attn, mask = batch["input_ids"], batch["attention_mask"], batch["loss_mask"]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
    logp = token_logprobs(logits[:, :-1].float(), ids[:, 1:])
    target_mask = mask[:, 1:]
    return sft_loss(logp, target_mask) * target_mask.sum() / max(total_tokens, 1)


@torch.no_grad()
def evaluate_sft(model, examples, pad_id: int, batch_size: int) -> float:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(examples), batch_size):
        chunk = examples[start : start + batch_size]
        batch = collate_right([t.input_ids for t in chunk], pad_id, [t.loss_mask for t in chunk])
        n = int(batch["loss_mask"][:, 1:].sum())
        total += float(sft_batch_loss(model, batch, n)) * n
        count += n
    model.train()
    return total / max(count, 1)


def run_sft(cfg: SFTConfig) -> dict:
    """Train, evaluate, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    set_threads(cfg.run.threads)
    seed_everything(cfg.run.seed)
    out = prepare_run_dir(cfg.run.out, cfg, "sft", cfg.run.overwrite)
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path)
    model = load_causal_lm(
        cfg.model.name_or_path, tokenizer, cfg.model.dtype, cfg.keep_dropout, cfg.model.trust_remote_code
    )
    train, evals, dropped = load_sft_data(cfg, tokenizer)
    opt_cfg = cfg.optim
    total_steps = steps_for(len(train), opt_cfg.batch_size, cfg.epochs, cfg.max_steps)
    optimizer = make_optimizer(model, opt_cfg.lr, opt_cfg.weight_decay, (opt_cfg.beta1, opt_cfg.beta2), opt_cfg.eps)
    scheduler = make_scheduler(optimizer, opt_cfg.schedule, opt_cfg.warmup_steps, total_steps, opt_cfg.min_lr_ratio)
    logger = MetricsLogger(out, "sft")
    logger.log(0, {"data/train_examples": len(train), "data/eval_examples": len(evals), "data/dropped_long": dropped})
    generator = torch.Generator().manual_seed(cfg.run.seed)
    micro = opt_cfg.batch_size // opt_cfg.grad_accum_steps
    model.train()
    bar = progress(total_steps, "sft", cfg.run.progress)
    t0, tokens_seen, eval_loss = time.perf_counter(), 0, None
    for step, idx in enumerate(batch_indices(len(train), opt_cfg.batch_size, total_steps, generator), 1):
        examples = [train[i] for i in idx.tolist()]
        total_tokens = sum(sum(t.loss_mask[1:]) for t in examples)
        loss_sum = 0.0
        for start in range(0, len(examples), micro):
            chunk = examples[start : start + micro]
            batch = collate_right([t.input_ids for t in chunk], tokenizer.pad_token_id, [t.loss_mask for t in chunk])
            loss = sft_batch_loss(model, batch, total_tokens)
            check_finite("SFT loss", loss, f"step {step}")
            loss.backward()
            loss_sum += float(loss)
            tokens_seen += int(batch["attention_mask"].sum())
        grad_norm = grad_norm_and_clip(model, opt_cfg.max_grad_norm, f"step {step}")
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum:.3f}")
        metrics = {}
        if step % cfg.run.log_every == 0 or step == total_steps:
            elapsed = time.perf_counter() - t0
            metrics.update({"train/loss": loss_sum, "optim/lr": scheduler.get_last_lr()[0],
                            "optim/grad_norm": grad_norm, "perf/tokens_per_s": tokens_seen / elapsed})
        if evals and (step % cfg.eval_every == 0 or step == total_steps):
            eval_loss = evaluate_sft(model, evals, tokenizer.pad_token_id, opt_cfg.batch_size)
            metrics["eval/loss"] = eval_loss
        if metrics:
            logger.log(step, metrics)
    bar.close()
    logger.close()
    save_final(out, model, tokenizer, {"stage": "sft", "steps": total_steps})
    return {"train/loss": loss_sum, "eval/loss": eval_loss, "steps": total_steps,
            "time_s": time.perf_counter() - t0, "model": model, "tokenizer": tokenizer}
