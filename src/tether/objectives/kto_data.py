"""KTO's rows: read and checked per file (unpaired ``prompt``/``completion``/``label`` rows, or
preference pairs split into a desirable and an undesirable row), tokenized, and each given the
mismatched pair its share of the reference point z₀ is estimated on.

The mismatched pairs (Ethayarajh et al. 2024 estimate z₀ = KL(π‖π_ref) on responses
put after unrelated prompts) are fixed once per file: the rows in a seeded shuffle, each row's
response after the prompt of the next row with a different prompt. A batch's z₀ is the mean
log-ratio of its own rows' mismatched pairs, so it does not depend on how the batch is cut into
micro-batches or ranks, and the reference scores every mismatched pair once, before training,
as it scores the rows themselves.
"""

from __future__ import annotations

import dataclasses
import random

from tether.data import load_records, tokenize_unpaired, unpaired_examples
from tether.errors import DataError
from tether.loops.common import LengthLimit, notice
from tether.objectives.sft import split_holdout

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
