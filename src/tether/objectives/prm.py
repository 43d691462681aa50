"""A process reward model (PRM): a scalar head on the SFT backbone that scores every step of a solution.

Rows are step-labelled solutions (:mod:`tether.data.steps`: PRM800K's and Math-Shepherd's shape).
A solution's steps are joined by ``step_separator`` (one token) and end with EOS; the head is read
at each step's end (its separator, the last step's EOS) and trained as a binary classifier of the
step's label, ``BCE(sigmoid(s_j), y_j)`` averaged over the batch's steps (Lightman et al. 2023,
"Let's Verify Step by Step", train a PRM to predict each step's label at its last token; Wang et
al. 2024, Math-Shepherd, the same with automatically labelled steps). Held out it reports
``eval/step_accuracy`` (a step's score above 0 for a correct step, below for a wrong one),
``eval/solution_accuracy`` (every step of a solution right) and the loss. The saved model is a
scalar-head checkpoint like the reward model's, with ``step_separator`` in its config.json.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tether.config import PRMConfig
from tether.data import collate_right, load_records
from tether.data.steps import TokenizedSteps, separator_id, step_examples, tokenize_steps
from tether.distributed import all_gather_objects
from tether.distributed.shard import strided
from tether.common.errors import DataError
from tether.engines import engine_settings
from tether.loops.common import data_limit, notice, steps_for
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_scalar_model, load_tokenizer
from tether.models.forward import hidden_states, scalar_head, score_head
from tether.models.loading import check_scalar_head_config, load_model_config
from tether.objectives.shared import optimizer_spec, split_holdout
from tether.roles.builder import build_trained, resume_adapter, resume_source
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run
from tether.types import to_device


def prm_inputs(cfg: PRMConfig):
    """(tokenizer, the model's config, train solutions, held-out solutions, counts), tokenized and
    checked before any weight: what ``tether prm --dry-run`` reads."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    config = load_model_config(cfg.model.name_or_path, "model.name_or_path", cfg.model.trust_remote_code)
    check_scalar_head_config(config, cfg.model.name_or_path, "model.name_or_path")
    sep, data = separator_id(tokenizer, cfg.step_separator), cfg.data
    limit = data_limit(cfg, {cfg.model.name_or_path: config})
    train = step_examples(load_records(data.train, data.train_split, key="data.train"), cfg.step_separator)
    if data.max_rows:
        train = train[: data.max_rows]
    if data.eval:
        evals = step_examples(load_records(data.eval, data.eval_split, key="data.eval"), cfg.step_separator)
    else:
        train, evals = split_holdout(train, data.eval_size, cfg.run.seed)

    def encode(rows):
        out = [tokenize_steps(ex, tokenizer, sep, limit.tokens, cfg.model.chat_template, data.on_long,
                              limit.capped_by) for ex in rows]
        kept = [t for t in out if t is not None]
        return kept, len(out) - len(kept), sum(t.truncated for t in kept)

    train_tok, dropped, truncated = encode(train)
    eval_tok, _, _ = encode(evals)
    if not train_tok:
        raise DataError(f"'{data.train}' (data.train): no solution has a step that fits within {limit.tokens} tokens.")
    if dropped or truncated:
        notice(f"{dropped} training solutions dropped and {truncated} cut to their first steps as longer than "
               f"{limit.tokens} tokens (data.on_long={data.on_long}).")
    steps = sum(len(t.labels) for t in train_tok)
    counts = {"train_steps": steps, "correct_steps": sum(sum(t.labels) for t in train_tok), "dropped_long": dropped,
              "truncated_long": truncated}
    return tokenizer, config, train_tok, eval_tok, counts


def prm_stage_inputs(cfg: PRMConfig) -> StageInputs:
    tokenizer, config, train, evals, counts = prm_inputs(cfg)
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, {cfg.model.name_or_path:
                                                                                            config})})


def step_scores(model, rows: list[TokenizedSteps], pad_id: int, autocast: str = "none") -> tuple[torch.Tensor, ...]:
    """The head at every step end: (scores (B, K), labels (B, K) float, valid (B, K) bool), K the
    most steps of a row; one forward over the B right-padded sequences."""
    batch = to_device(collate_right([r.prompt_ids + r.response_ids for r in rows], pad_id),
                      next(model.parameters()).device)
    k = max(len(r.ends) for r in rows)
    positions = [[len(r.prompt_ids) + e for e in r.ends] + [len(r.prompt_ids) + r.ends[-1]] * (k - len(r.ends))
                 for r in rows]  # a row's padding repeats its last step (masked out)
    device = batch["input_ids"].device
    keep = torch.tensor(positions, device=device)
    picked = hidden_states(model, batch["input_ids"], batch["attention_mask"], autocast, keep=keep)
    scores = scalar_head(score_head(model), picked)
    labels = torch.tensor([[float(v) for v in r.labels] + [0.0] * (k - len(r.labels)) for r in rows], device=device)
    valid = torch.tensor([[True] * len(r.labels) + [False] * (k - len(r.labels)) for r in rows], device=device)
    return scores, labels, valid


def step_loss(scores: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of the (B, K) step scores (logits) against the labels, over the valid steps."""
    return F.binary_cross_entropy_with_logits(scores[valid], labels[valid])


def step_metrics(scores: list[torch.Tensor], labels: list[torch.Tensor]) -> dict:
    """Held-out metrics from each solution's (K_i,) step scores and labels: ``eval/step_accuracy``,
    ``eval/solution_accuracy`` (every step right), ``eval/loss`` (mean BCE over the steps) and
    ``eval/score_mean``."""
    right = [((s > 0) == (y > 0.5)) for s, y in zip(scores, labels)]
    flat_s, flat_y = torch.cat(scores), torch.cat(labels)
    return {"eval/step_accuracy": float(torch.cat(right).float().mean()),
            "eval/solution_accuracy": sum(bool(r.all()) for r in right) / len(right),
            "eval/loss": float(F.binary_cross_entropy_with_logits(flat_s, flat_y)),
            "eval/score_mean": float(flat_s.mean())}


@torch.no_grad()
def evaluate_steps(model, rows: list[TokenizedSteps], pad_id: int, batch_size: int, autocast: str = "none") -> dict:
    """:func:`step_metrics` over the held-out solutions (data parallel: each rank scores its share)."""
    was_training = model.training
    model.eval()
    scores, labels = [], []
    mine = strided(rows)
    for start in range(0, len(mine), batch_size):
        s, y, valid = step_scores(model, mine[start:start + batch_size], pad_id, autocast)
        for i in range(s.shape[0]):
            scores.append(s[i][valid[i]].float().cpu())
            labels.append(y[i][valid[i]].cpu())
    model.train(was_training)
    shares = all_gather_objects((scores, labels))
    return step_metrics([x for share in shares for x in share[0]], [x for share in shares for x in share[1]])


def build_prm_roles(cfg: PRMConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """The PRM being trained, as the ``reward`` role: a scalar model (a fresh head on the SFT
    model, or the checkpoint's trained one), its step loss over training solutions and its held-out
    evaluation."""
    inputs = inputs or prm_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    source, key = resume_source(cfg, checkpoint)
    model = load_scalar_model(source, tokenizer, cfg.model.dtype, cfg.keep_dropout, head_init_std=cfg.head_init_std,
                              new_head=key is not None, trust_remote_code=cfg.model.trust_remote_code, key=key,
                              attn_implementation=cfg.model.attn_implementation, head_seed=cfg.head_seed)
    engine = build_trained(model, optimizer_spec(cfg.optim, total_steps), engine_settings(cfg.run, cfg.model, cfg.cpu),
                           lora=cfg.lora, adapter=resume_adapter(cfg, checkpoint),
                           checkpointing=cfg.gradient_checkpointing, scalar=True, strategy=cfg.distributed.strategy)
    engine.config.score_offset = 0.0
    engine.config.step_separator = cfg.step_separator  # a PRM's step ends, for whoever loads it
    pad, autocast = tokenizer.pad_token_id, engine.autocast

    def loss(module, items):
        scores, labels, valid = step_scores(module, [train[i] for i in items], pad, autocast)
        value = step_loss(scores, labels, valid)
        right = ((scores > 0) == (labels > 0.5))[valid].float().mean()
        return value, {"train/loss": float(value.detach()), "train/step_accuracy": float(right)}

    def evaluate() -> dict:
        return engine.infer(evaluate_steps, evals, pad, cfg.optim.batch_size, autocast)

    return StageRoles({"reward": SupervisedModel(engine, loss, evaluate if evals else None, name="prm loss")})


PRM = StageBody(name="prm", role="reward", inputs=prm_stage_inputs, build=build_prm_roles,
                counted=("train_solutions", "eval_solutions"), card_role="reward")


@guarded_run
def run_prm(cfg: PRMConfig, resume: bool = False) -> dict:
    """Train the PRM, evaluate it, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, PRM, resume)


def plan_inputs(cfg):
    """The PRM's inputs as its dry run reads them."""
    tokenizer, config, train, evals, counts = prm_inputs(cfg)
    return tokenizer, {cfg.model.name_or_path: config}, train, evals, counts
