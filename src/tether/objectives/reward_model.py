"""Stage 2: a Bradley-Terry reward model, a scalar head on the SFT backbone.

Loss −log σ(r_chosen − r_rejected − m) (Ouyang et al. 2022 eq. 1; margin m from Touvron et
al. 2023 sec. 3.2.2). The score is read at the last real token of prompt+response. After
training, the mean score of held-out responses is stored as ``config.score_offset`` and
subtracted by tether's reward role: BT only identifies rewards up to a constant (the gauge).
The pairs, with each one's margin when ``margin_field`` names it, are read by
:func:`tether.objectives.shared.load_pairs`, as DPO, SimPO and ORPO read them.
"""

from __future__ import annotations

import logging

import torch

from tether.algos import bradley_terry_loss
from tether.algos.losses import distilled_bradley_terry_loss
from tether.config import RewardModelConfig
from tether.data import collate_right
from tether.distributed import all_gather_objects
from tether.distributed.shard import strided
from tether.engines import engine_settings
from tether.loops.common import data_limit, steps_for
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.metrics import MetricsLogger
from tether.models import load_scalar_model, load_tokenizer
from tether.models.forward import last_token_scores
from tether.models.loading import check_scalar_head_config, load_model_config
from tether.objectives.shared import load_pairs, optimizer_spec
from tether.roles.builder import build_trained, resume_adapter, resume_source
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run
from tether.types import to_device

log = logging.getLogger(__name__)


def rm_inputs(cfg: RewardModelConfig):
    """Everything the reward-model stage reads before the weights, checked: (tokenizer, the
    model's config, :func:`load_pairs`' result). ``tether rm --dry-run`` stops here."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    config = load_model_config(cfg.model.name_or_path, "model.name_or_path", cfg.model.trust_remote_code)
    check_scalar_head_config(config, cfg.model.name_or_path, "model.name_or_path")
    return tokenizer, config, load_pairs(cfg, tokenizer, data_limit(cfg, {cfg.model.name_or_path: config}))


def rm_stage_inputs(cfg: RewardModelConfig) -> StageInputs:
    """:func:`rm_inputs` as the skeleton takes them (the margins ride along in ``extra``). With a
    ``teacher`` (distillation) every pair is scored by it and oriented so that its preferred
    response is the chosen one; its margins t_c − t_r (≥ 0) replace the labels."""
    tokenizer, config, (train, margins, evals, counts) = rm_inputs(cfg)
    limits = {"data.max_length": data_limit(cfg, {cfg.model.name_or_path: config})}
    extra = {"margins": margins}
    if cfg.teacher:
        train, teacher_train, flipped = teacher_oriented(cfg, tokenizer, train)
        evals, teacher_eval, _ = teacher_oriented(cfg, tokenizer, evals)
        extra.update(teacher_train=teacher_train, teacher_eval=teacher_eval)
        counts = {**counts, "teacher_flipped": flipped}
    return StageInputs(tokenizer, train, evals, counts, limits, extra)


@torch.no_grad()
def teacher_oriented(cfg: RewardModelConfig, tokenizer, pairs: list, batch_size: int = 64):
    """(``pairs`` each oriented by ``cfg.teacher``'s scores, their (B,) teacher margins t_c − t_r ≥ 0,
    how many were swapped). The teacher reads the policy's token ids: its tokenizer is checked."""
    from dataclasses import replace

    from tether.roles.sources import same_vocab

    same_vocab(tokenizer, load_tokenizer(cfg.teacher, key="teacher"), f"teacher '{cfg.teacher}' (teacher)")
    teacher = load_scalar_model(cfg.teacher, tokenizer, cfg.model.dtype, False, key="teacher",
                                trust_remote_code=cfg.model.trust_remote_code,
                                attn_implementation=cfg.model.attn_implementation)
    teacher.eval()
    margins = []
    for start in range(0, len(pairs), batch_size):
        c, r = pair_scores(teacher, pairs[start:start + batch_size], tokenizer.pad_token_id)
        margins.append((c - r).float().cpu())
    margin = torch.cat(margins) if margins else torch.zeros(0)
    swap = (margin < 0).tolist()
    oriented = [replace(p, chosen_ids=p.rejected_ids, rejected_ids=p.chosen_ids) if flip else p
                for p, flip in zip(pairs, swap)]
    del teacher
    return oriented, margin.abs(), int(sum(swap))


def pair_scores(model, pairs: list, pad_id: int, autocast: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Raw scores (B,), (B,) of chosen and rejected, in one forward over 2B sequences."""
    seqs = [p.prompt_ids + p.chosen_ids for p in pairs] + [p.prompt_ids + p.rejected_ids for p in pairs]
    batch = to_device(collate_right(seqs, pad_id), next(model.parameters()).device)
    scores = last_token_scores(model, batch["input_ids"], batch["attention_mask"], autocast)
    return scores[: len(pairs)], scores[len(pairs) :]


@torch.no_grad()
def evaluate_pairs(model, pairs: list, pad_id: int, batch_size: int, offset: float = 0.0,
                   autocast: str = "none", teacher_margins: torch.Tensor | None = None) -> dict:
    """Held-out pairwise accuracy, mean margin r_c − r_r, and the mean response score; with the
    pairs' (B,) ``teacher_margins`` (distillation: the pairs oriented by the teacher, so accuracy is
    agreement with it), the loss against its soft labels and the correlation of the two margins."""
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
    out = {
        "eval/accuracy": float((c > r).float().mean()),
        "eval/margin": float((c - r).mean()),
        "eval/score_mean": float(torch.cat([c, r]).mean()) - offset,
        "eval/loss": float(bradley_terry_loss(c, r)),
    }
    if teacher_margins is not None:
        # The gathered order is each rank's strided share in turn: put the teacher's margins in it.
        t = torch.cat([torch.as_tensor(s) for s in all_gather_objects(strided(teacher_margins.tolist()))]).float()
        out["eval/loss"] = float(distilled_bradley_terry_loss(c, r, t))
        out["eval/teacher_margin_corr"] = float(torch.corrcoef(torch.stack([c - r, t]))[0, 1])
    return out


def build_rm_roles(cfg: RewardModelConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                   total_steps: int | None = None) -> StageRoles:
    """The reward model being trained, as the ``reward`` role, built where it runs: a scalar model
    (a fresh head on the SFT model, or the checkpoint's trained one) through the trained-model
    builder, its Bradley-Terry loss over training pairs and its held-out evaluation."""
    inputs = inputs or rm_stage_inputs(cfg)
    train, evals, tokenizer, margins = inputs.train, inputs.evals, inputs.tokenizer, inputs.extra["margins"]
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg.run, cfg.model, cfg.cpu)
    # The head is new when starting from the SFT model (a causal LM); a trained one is kept.
    # A LoRA checkpoint holds the adapters (and the head) alone: the base comes from the config.
    source, key = resume_source(cfg, checkpoint)
    model = load_scalar_model(source, tokenizer, cfg.model.dtype, cfg.keep_dropout, head_init_std=cfg.head_init_std,
                              new_head=key is not None, trust_remote_code=cfg.model.trust_remote_code, key=key,
                              attn_implementation=cfg.model.attn_implementation, head_seed=cfg.head_seed)
    engine = build_trained(model, optimizer_spec(cfg.optim, total_steps), settings, lora=cfg.lora,
                           adapter=resume_adapter(cfg, checkpoint), checkpointing=cfg.gradient_checkpointing,
                           scalar=True, strategy=cfg.distributed.strategy)
    engine.config.score_offset = 0.0
    pad, autocast = tokenizer.pad_token_id, engine.autocast

    teacher_train, teacher_eval = inputs.extra.get("teacher_train"), inputs.extra.get("teacher_eval")

    def loss(module, items):
        c, r = pair_scores(module, [train[i] for i in items], pad, autocast)
        if teacher_train is not None:  # distillation: the teacher's preference probabilities
            value = distilled_bradley_terry_loss(c, r, engine.to_device(teacher_train[list(items)]))
        else:
            margin = engine.to_device(torch.tensor([margins[i] for i in items])) if cfg.margin_field else None
            value = bradley_terry_loss(c, r, margin)
        return value, {"train/loss": float(value.detach()), "train/accuracy": float((c > r).float().mean())}

    def evaluate() -> dict:
        return engine.infer(evaluate_pairs, evals, pad, cfg.optim.batch_size, 0.0, autocast, teacher_eval)

    return StageRoles({"reward": SupervisedModel(engine, loss, evaluate if evals else None, name="rm loss")})


def store_offset(trained, cfg: RewardModelConfig, eval_metrics: dict, out, total_steps: int) -> dict:
    """Gauge fix: held-out responses score 0 on average (mean-centering, reference text 001); the
    offset is saved in the model's config and logged. Without held-out pairs it stays 0."""
    offset = 0.0
    if cfg.normalize and "eval/score_mean" in eval_metrics:
        offset = eval_metrics["eval/score_mean"]
        trained.set_score_offset(offset)
        with MetricsLogger(out, RM.name) as logger:
            logger.log(total_steps, {"rm/score_offset": offset})
    return {"score_offset": offset}


RM = StageBody(name="rm", role="reward", inputs=rm_stage_inputs, build=build_rm_roles,
               counted=("train_pairs", "eval_pairs"), finish=store_offset, card_role="reward")


@guarded_run
def run_reward_model(cfg: RewardModelConfig, resume: bool = False) -> dict:
    """Train the RM, store the normalisation offset, save ``run.out``; return final metrics."""
    return run_stage(cfg, RM, resume)


def plan_inputs(cfg):
    """The reward model's inputs as its dry run reads them (:func:`tether.plan.dry_run.plan_supervised`)."""
    tokenizer, config, (train, _, evals, counts) = rm_inputs(cfg)
    return tokenizer, {cfg.model.name_or_path: config}, train, evals, counts
