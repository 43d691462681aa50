"""KTO: the policy trained on responses labelled desirable or undesirable, one at a time, against a
frozen reference, with no reward model and no RL loop (Ethayarajh et al. 2024; the loss in
:mod:`tether.algos.preference`). It reads unpaired rows or the reward-model stage's preference
pairs, each pair split into its chosen row (desirable) and its rejected row (undesirable)
(:mod:`tether.objectives.kto_data`).

As DPO's: the reference's summed log-probs are computed once, before the first step, for the
training rows the run's steps draw and every held-out row, each row's response after its own
prompt and after its mismatched prompt; under LoRA the reference is the policy's base with its
adapters off, otherwise a frozen model loaded for that pass and dropped.

Each step, before its micro-batches, the policy scores the batch's mismatched pairs without
gradient (each rank its share, gathered): z₀ = max(0, mean(log π − log π_ref)) over the whole
batch (the paper's reference point, not back-propagated through). Every micro-batch then takes
the same z₀, so gradient accumulation and data parallel give exactly the one-batch step.
Held-out evaluation reports the implicit reward β·(log π − log π_ref) of desirable and
undesirable rows, their margin, z₀ over the held-out rows and, for rows split from pairs, the
pairwise accuracy DPO reports.

Deviation: the paper pairs each response with another prompt of the same batch; here each row's
partner prompt is fixed once over its file (:func:`tether.objectives.kto_data.mismatched_partners`), an
estimate of the same expectation whose reference side is computed once, before training.
"""

from __future__ import annotations

import torch

from tether.algos.dpo import implicit_rewards
from tether.algos.preference import kto_loss, kto_reference_point
from tether.config import KTOConfig
from tether.engines import engine_settings
from tether.loops.common import data_limit, notice, steps_for
from tether.objectives.dpo import pair_logprob_table, policy_and_reference, reference_table, response_logprobs
from tether.objectives.kto_data import load_kto_rows, ratio_notice
from tether.objectives.sft import trained_causal_lm
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run


def kto_logprobs(model, rows: list, pad_id: int, autocast: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probs (B,), (B,) of each row's response after its own prompt and after its
    mismatched prompt, in one forward over 2B sequences."""
    prompts = [r.prompt_ids for r in rows] + [r.kl_prompt_ids for r in rows]
    responses = [r.completion_ids for r in rows] + [r.kl_completion_ids for r in rows]
    sums = response_logprobs(model, prompts, responses, pad_id, autocast)
    return sums[: len(rows)], sums[len(rows):]


def mismatched_logprobs(model, rows: list, pad_id: int, autocast: str = "none") -> tuple[torch.Tensor]:
    """(B,) summed log-probs of each row's mismatched pair (one column, for :func:`pair_logprob_table`)."""
    return (response_logprobs(model, [r.kl_prompt_ids for r in rows], [r.kl_completion_ids for r in rows],
                              pad_id, autocast),)


def reward_means(rewards: torch.Tensor, desirable: torch.Tensor, n_desirable: int, n_undesirable: int,
                 share: float = 1.0, prefix: str = "train/") -> dict:
    """The mean implicit reward of the desirable and of the undesirable rows, and their margin,
    as a part of a batch contributes them: ``rewards``, ``desirable`` (b,) this part's rows;
    ``n_desirable``, ``n_undesirable``: the whole batch's; ``share``: this part's share of the
    batch's rows (the weight its stats are summed with). Summed over the parts with those weights,
    the values are the batch's means. A kind the batch lacks has no mean (no key)."""
    out = {}
    if n_desirable:
        out[f"{prefix}desirable_reward"] = float(rewards[desirable].sum()) / n_desirable / share
    if n_undesirable:
        out[f"{prefix}undesirable_reward"] = float(rewards[~desirable].sum()) / n_undesirable / share
    if n_desirable and n_undesirable:
        out[f"{prefix}margin"] = out[f"{prefix}desirable_reward"] - out[f"{prefix}undesirable_reward"]
    return out


def pair_accuracy(rewards: torch.Tensor, rows: list) -> float | None:
    """Share of the pairs (rows split from one preference pair, both kept) whose desirable row has
    the larger implicit reward; None without such pairs."""
    by_pair: dict[int, dict[bool, float]] = {}
    for reward, row in zip(rewards.tolist(), rows):
        if row.pair is not None:
            by_pair.setdefault(row.pair, {})[row.desirable] = reward
    whole = [p for p in by_pair.values() if len(p) == 2]
    return sum(p[True] > p[False] for p in whole) / len(whole) if whole else None


@torch.no_grad()
def evaluate_kto(model, rows: list, ref: torch.Tensor, pad_id: int, batch_size: int, beta: float,
                 desirable_weight: float, undesirable_weight: float, autocast: str = "none") -> dict:
    """Held-out loss, z₀ over the held-out rows' mismatched pairs, the implicit reward's means by
    label and their margin, and the pairwise accuracy of rows split from pairs (``ref``: the rows'
    (M, 2) reference log-probs, own prompt and mismatched)."""
    policy = pair_logprob_table(model, rows, pad_id, batch_size, autocast, kto_logprobs)
    ref = ref.to(policy.device)
    desirable = torch.tensor([r.desirable for r in rows], dtype=torch.bool)
    z0 = kto_reference_point(policy[:, 1], ref[:, 1])
    loss = kto_loss(policy[:, 0], ref[:, 0], desirable, z0, beta, desirable_weight, undesirable_weight)
    rewards = implicit_rewards(policy[:, 0], ref[:, 0], beta)
    n_d = int(desirable.sum())
    out = {"eval/loss": float(loss), "eval/kl_reference": float(z0),
           **reward_means(rewards, desirable, n_d, len(rows) - n_d, prefix="eval/")}
    accuracy = pair_accuracy(rewards, rows)
    if accuracy is not None:
        out["eval/accuracy"] = accuracy
    return out


def kto_inputs(cfg: KTOConfig):
    """Everything KTO reads before the weights, checked: (tokenizer, the models' configs by path,
    (train rows, held-out rows, counts)). ``tether kto --dry-run`` stops here."""
    tokenizer, models = policy_and_reference(cfg)
    return tokenizer, models, load_kto_rows(cfg, tokenizer, data_limit(cfg, models))


def kto_stage_inputs(cfg: KTOConfig) -> StageInputs:
    """:func:`kto_inputs` as the skeleton takes them, the limits fitted to the policy and the reference."""
    tokenizer, configs, (train, evals, counts) = kto_inputs(cfg)
    notice(ratio_notice(counts))
    return StageInputs(tokenizer, train, evals, counts, {"data.max_length": data_limit(cfg, configs)})


def build_kto_roles(cfg: KTOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """KTO's policy role, built where it runs: the policy through the trained-model builder, the
    reference's log-probs of the rows the run will draw (before the first step), z₀ of each batch
    (``before_step``), the loss over training rows and the held-out evaluation."""
    inputs = inputs or kto_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg)
    pad, batch = tokenizer.pad_token_id, cfg.optim.batch_size
    micro = max(1, batch // cfg.optim.grad_accum_steps)
    engine = trained_causal_lm(cfg, tokenizer, checkpoint, total_steps, settings)
    autocast = engine.autocast
    ref_train, ref_eval = reference_table(cfg, engine, tokenizer, settings, train, evals, total_steps, kto_logprobs)
    k = cfg.kto
    labels = torch.tensor([r.desirable for r in train], dtype=torch.bool)
    step: dict = {}  # this batch's z₀, its size and its desirable / undesirable counts

    def before_step(rows: list[int]) -> None:
        index = torch.tensor(rows)
        policy = engine.infer(pair_logprob_table, [train[i] for i in rows], pad, micro, autocast,
                              mismatched_logprobs)[:, 0]
        n_d = int(labels[index].sum())
        step.update(z0=kto_reference_point(policy, ref_train[index, 1]), rows=len(rows), n_d=n_d,
                    n_u=len(rows) - n_d)

    def loss(module, items):
        rows = [train[i] for i in items]
        policy = response_logprobs(module, [r.prompt_ids for r in rows], [r.completion_ids for r in rows], pad,
                                   autocast)
        ref = engine.to_device(ref_train[torch.tensor(items), 0])
        desirable = engine.to_device(labels[torch.tensor(items)])
        value = kto_loss(policy, ref, desirable, step["z0"], k.beta, k.desirable_weight, k.undesirable_weight)
        with torch.no_grad():
            rewards = implicit_rewards(policy, ref, k.beta)
            means = reward_means(rewards, desirable, step["n_d"], step["n_u"], len(items) / step["rows"])
        return value, {"train/loss": float(value.detach()), "kto/kl_reference": float(step["z0"]), **means}

    def evaluate() -> dict:
        return engine.infer(evaluate_kto, evals, ref_eval, pad, batch, k.beta, k.desirable_weight,
                            k.undesirable_weight, autocast)

    return StageRoles({"policy": SupervisedModel(engine, loss, evaluate if evals else None, name="kto loss",
                                                 before_step=before_step)})


KTO = StageBody(name="kto", role="policy", inputs=kto_stage_inputs, build=build_kto_roles,
                counted=("train_rows", "eval_rows"))


@guarded_run
def run_kto(cfg: KTOConfig, resume: bool = False) -> dict:
    """Train the policy with KTO, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, KTO, resume)
