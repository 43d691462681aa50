"""KTO: the policy trained on responses labelled desirable or undesirable, one at a time, against a
frozen reference, with no reward model and no RL loop (Ethayarajh et al. 2024; the loss in
:mod:`tether.algos.preference`). It reads unpaired rows or the reward-model stage's preference
pairs, each pair split into its chosen row (desirable) and its rejected row (undesirable).

As DPO's: the reference's summed log-probs are computed once, before the first step, for the
training rows the run's steps draw and every held-out row, each row's response after its own
prompt and after its mismatched prompt; under LoRA the reference is the policy's base with its
adapters off, otherwise a frozen model loaded for that pass and dropped
(:func:`tether.objectives.shared.reference_table`).

The mismatched pairs (Ethayarajh et al. 2024 estimate z₀ = KL(π‖π_ref) on responses put after
unrelated prompts) are fixed once per file: the rows in a seeded shuffle, each row's response
after the prompt of the next row with a different prompt. A batch's z₀ is the mean log-ratio of
its own rows' mismatched pairs, so it does not depend on how the batch is cut into micro-batches
or ranks, and the reference scores every mismatched pair once, before training, as it scores the
rows themselves.

Each step, before its micro-batches, the policy scores the batch's mismatched pairs without
gradient (each rank its share, gathered): z₀ = max(0, mean(log π − log π_ref)) over the whole
batch (the paper's reference point, not back-propagated through). Every micro-batch then takes
the same z₀, so gradient accumulation and data parallel give exactly the one-batch step.
Held-out evaluation reports the implicit reward β·(log π − log π_ref) of desirable and
undesirable rows, their margin, z₀ over the held-out rows and, for rows split from pairs, the
pairwise accuracy DPO reports.

Deviation: the paper pairs each response with another prompt of the same batch; here each row's
partner prompt is fixed once over its file (:func:`mismatched_partners`), an
estimate of the same expectation whose reference side is computed once, before training.
"""

from __future__ import annotations

import dataclasses
import random

import torch

from tether.algos.dpo import implicit_rewards
from tether.algos.preference import kto_loss, kto_reference_point
from tether.config import KTOConfig
from tether.data import load_records, tokenize_unpaired, unpaired_examples
from tether.engines import engine_settings
from tether.common.errors import DataError
from tether.loops.common import LengthLimit, data_limit, notice, steps_for
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.objectives.shared import (
    pair_logprob_table,
    policy_and_reference,
    reference_table,
    response_logprobs,
    split_holdout,
    trained_causal_lm,
)
from tether.roles.supervised import StageRoles, SupervisedModel
from tether.runs import guarded_run

#: How many rows past the next one a row's mismatched prompt is looked for, when prompts repeat.
PARTNER_TRIES = 16


def mismatched_partners(prompts: list, seed: int, tries: int = PARTNER_TRIES) -> list[int]:
    """For each row i, the row j whose prompt its response is scored after for z₀: the rows in a
    shuffle by ``seed``, j the first of the next ``tries`` rows whose prompt differs from row i's
    (the next row if none does; row i itself when it is the only row). ``prompts``: comparable
    keys (token tuples)."""
    n = len(prompts)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    partners = [0] * n
    for pos, i in enumerate(order):
        partners[i] = order[(pos + 1) % n]
        for step in range(1, min(tries, n - 1) + 1):
            j = order[(pos + step) % n]
            if prompts[j] != prompts[i]:
                partners[i] = j
                break
    return partners


def with_mismatched(rows: list, seed: int, max_length: int) -> list:
    """``rows`` (:class:`~tether.data.TokenizedUnpaired`) with their mismatched pairs: the partner's
    prompt, the row's response cut to fit ``max_length`` after it."""
    partners = mismatched_partners([tuple(r.prompt_ids) for r in rows], seed)
    out = []
    for row, j in zip(rows, partners):
        prompt = rows[j].prompt_ids
        room = max(1, max_length - len(prompt))
        out.append(dataclasses.replace(row, kl_prompt_ids=prompt, kl_completion_ids=row.completion_ids[:room]))
    return out


def file_rows(examples: list) -> list[list]:
    """The examples by file row: a split pair's two rows together, an unpaired row alone (what
    ``data.max_rows`` and the held-out slice count)."""
    out: list[list] = []
    for ex in examples:
        if out and ex.pair is not None and out[-1][0].pair == ex.pair:
            out[-1].append(ex)
        else:
            out.append([ex])
    return out


def desirable_ratio(n_desirable: int, n_undesirable: int, desirable_weight: float,
                    undesirable_weight: float) -> float | None:
    """λ_D·n_D / (λ_U·n_U): Ethayarajh et al. 2024 advise [1, 4/3]; None
    with no undesirable rows."""
    if not n_undesirable:
        return None
    return desirable_weight * n_desirable / (undesirable_weight * n_undesirable)


def load_kto_rows(cfg, tokenizer, limit: LengthLimit | None = None) -> tuple[list, list, dict]:
    """Tokenized training and held-out rows with their mismatched pairs, and the data counts
    (``desirable``, ``undesirable``, their weighted ratio, ``identical_skipped``, ``dropped_long``,
    ``truncated_long`` and the held-out ``eval_*``). ``limit``: data.max_length fitted to the models."""
    data = cfg.data
    limit = limit or LengthLimit(data.max_length)
    train, counts = unpaired_examples(load_records(data.train, data.train_split, key="data.train"),
                                      cfg.on_identical)
    groups = file_rows(train)
    if data.max_rows:
        groups = groups[: data.max_rows]
    if data.eval:
        evals, _ = unpaired_examples(load_records(data.eval, data.eval_split, key="data.eval"), cfg.on_identical)
    else:
        groups, held = split_holdout(groups, data.eval_size, cfg.run.seed)
        evals = [ex for group in held for ex in group]
    train = [ex for group in groups for ex in group]

    def encode(examples):
        out = [tokenize_unpaired(ex, tokenizer, limit.tokens, cfg.model.chat_template, data.on_long,
                                 limit.capped_by) for ex in examples]
        out = [row for row in out if row is not None]
        return out, {"dropped_long": len(examples) - len(out), "truncated_long": sum(r.truncated for r in out)}

    train_rows, train_counts = encode(train)
    eval_rows, eval_counts = encode(evals)
    if not train_rows:
        raise DataError(f"'{data.train}' (data.train): no usable rows after tokenization"
                        + (f" to {limit.tokens} tokens ({limit.capped_by})." if limit.capped_by else "."))
    if limit.capped_by and (train_counts["dropped_long"] or train_counts["truncated_long"]):
        notice(f"{train_counts['truncated_long']} training rows truncated and {train_counts['dropped_long']} "
               f"dropped at {limit.tokens} tokens ({limit.capped_by}).")
    n_d = sum(r.desirable for r in train_rows)
    n_u = len(train_rows) - n_d
    ratio = desirable_ratio(n_d, n_u, cfg.kto.desirable_weight, cfg.kto.undesirable_weight)
    counts = {**counts, "desirable": n_d, "undesirable": n_u, **train_counts,
              **{f"eval_{k}": v for k, v in eval_counts.items()}}
    if ratio is not None:
        counts["desirable_weight_ratio"] = ratio
    seed = cfg.run.seed
    return (with_mismatched(train_rows, seed, limit.tokens), with_mismatched(eval_rows, seed + 1, limit.tokens),
            counts)


def ratio_notice(counts: dict) -> str:
    """The line a KTO run starts with: its desirable and undesirable rows and their weighted ratio."""
    line = f"KTO on {counts['desirable']} desirable and {counts['undesirable']} undesirable training rows"
    ratio = counts.get("desirable_weight_ratio")
    if ratio is None:
        return line + " (with no undesirable rows, only desirable responses are raised)"
    line += f": kto.desirable_weight x n_D / (kto.undesirable_weight x n_U) = {ratio:.3g}"
    if not 1.0 <= ratio <= 4 / 3:
        line += (" (Ethayarajh et al. 2024 advise keeping it within [1, 4/3]: set kto.desirable_weight or "
                 "kto.undesirable_weight)")
    return line


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


def build_kto_roles(cfg: KTOConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                    total_steps: int | None = None) -> StageRoles:
    """KTO's policy role, built where it runs: the policy through the trained-model builder, the
    reference's log-probs of the rows the run will draw (before the first step), z₀ of each batch
    (``before_step``), the loss over training rows and the held-out evaluation."""
    inputs = inputs or kto_stage_inputs(cfg)
    train, evals, tokenizer = inputs.train, inputs.evals, inputs.tokenizer
    total_steps = total_steps or steps_for(len(train), cfg.optim.batch_size, cfg.epochs, cfg.max_steps)
    settings = engine_settings(cfg.run, cfg.model, cfg.cpu)
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


def plan_inputs(cfg):
    """KTO's inputs as its dry run reads them (:func:`tether.plan.dry_run.plan_supervised`)."""
    tokenizer, configs, (train, evals, counts) = kto_inputs(cfg)
    return tokenizer, configs, train, evals, counts
