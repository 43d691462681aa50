"""Stage 1: supervised fine-tuning on demonstrations, loss on response tokens only.

The prompt (formatted with the chat template) carries no loss: the model learns to answer,
not to imitate users (Ouyang et al. 2022, sec. 3.5).
"""

from __future__ import annotations

import logging


from tether.config import SFTConfig
from tether.data import load_records, sft_examples, tokenize_sft
from tether.common.errors import DataError
from tether.loops.common import LengthLimit, data_limit, notice
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_tokenizer
from tether.models.loading import load_model_config
from tether.objectives.shared import response_lm_roles, split_holdout
from tether.roles.supervised import StageRoles
from tether.runs import guarded_run

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


def build_sft_roles(cfg: SFTConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """SFT's policy role, built where it runs (:func:`tether.objectives.shared.response_lm_roles`).
    ``inputs``: the stage's inputs when the loop holds them (this process); a Ray worker reads its own."""
    return response_lm_roles(cfg, inputs or sft_stage_inputs(cfg), checkpoint, total_steps)


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
