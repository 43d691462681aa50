"""A generative judge (GenRM): a causal LM fine-tuned to write the verdict a pairwise judge writes.

Each preference pair (prompt, chosen, rejected) becomes two supervised examples, the pairwise
rubric filled in both orders (:func:`tether.algos.judge_format.fill`) as the user message and the
verdict as the response: chosen shown as A → ``verdicts[0]`` (``Winner: A``), chosen shown as B →
``verdicts[1]`` (``Winner: B``). The
loss is SFT's, on the verdict's tokens only (:func:`tether.objectives.shared.response_lm_roles`).
Training on both orders teaches the verdict to follow the answers, not their positions (Zheng et
al. 2023 swap both orders at inference; here the data does it too). The trained model is a judge
for the ``judge`` reward kind (``judge.path``, or `tether serve` it) and for `tether label
--judge-path`, asked with the same rubric.

Held out, besides the verdict tokens' loss: ``eval/verdict_accuracy``, the share of held-out
examples whose right verdict is likelier than the wrong one (teacher-forced, no sampling), and
``eval/pair_accuracy``, the share of pairs right in both orders (a judge that always answers A
scores 0.5 and 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.algos.judge_format import DEFAULT_PAIRWISE_RUBRIC, fill, gold_agreement, pairwise_outcome
from tether.config import GenRMConfig
from tether.common.errors import ConfigError, DataError
from tether.data import SFTExample, collate_right, load_records, preference_examples, prompt_text, tokenize_sft
from tether.data.records import gold_margins
from tether.loops.common import LengthLimit, data_limit, notice
from tether.loops.stage import StageBody, StageInputs, run_stage
from tether.models import load_tokenizer
from tether.models.forward import sequence_logprobs
from tether.models.loading import load_model_config
from tether.objectives.shared import response_lm_roles, split_holdout
from tether.roles.supervised import StageRoles
from tether.runs import guarded_run
from tether.types import to_device

def rubric_of(cfg: GenRMConfig) -> str:
    """The pairwise rubric the judge learns (and will be asked with): ``rubric``'s file or the built-in one."""
    if cfg.rubric is None:
        return DEFAULT_PAIRWISE_RUBRIC
    from pathlib import Path

    try:
        text = Path(cfg.rubric).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"Config key 'rubric' = {cfg.rubric!r}: the rubric file could not be read ({err}).") from None
    missing = [p for p in ("{prompt}", "{response_a}", "{response_b}") if p not in text]
    if missing:
        raise ConfigError(f"Config key 'rubric' = {cfg.rubric!r}: the rubric has no {' or '.join(missing)} "
                          "placeholder; it is filled with each pair's prompt and two responses.")
    return text


def judge_examples(pairs, rubric: str, verdicts: list[str]) -> list[tuple[SFTExample, SFTExample]]:
    """Each pair in both orders as (the example with the right verdict, the same with the wrong one):
    chosen as A first, then chosen as B; ``verdicts``: what the judge writes for A, for B."""
    out = []
    for ex in pairs:
        text = prompt_text(ex.prompt)
        for first, second, right in ((ex.chosen, ex.rejected, 0), (ex.rejected, ex.chosen, 1)):
            ask = [{"role": "user", "content": fill(rubric, prompt=text, response_a=first, response_b=second)}]
            out.append(tuple(SFTExample(ask, verdicts[v], ex.source, ex.row) for v in (right, 1 - right)))
    return out


def genrm_inputs(cfg: GenRMConfig):
    """(tokenizer, model config, train examples, held-out (right, wrong) example pairs, counts):
    the preference pairs rendered and tokenized, checked before any weight."""
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.name_or_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    config = load_model_config(cfg.model.name_or_path, "model.name_or_path", cfg.model.trust_remote_code)
    limit = data_limit(cfg, {cfg.model.name_or_path: config})
    rubric, data = rubric_of(cfg), cfg.data
    train_records = load_records(data.train, data.train_split, key="data.train")
    train, counts = preference_examples(train_records, "skip")
    if data.max_rows:
        train = train[: data.max_rows]
    if data.eval:
        eval_records = load_records(data.eval, data.eval_split, key="data.eval")
        evals, _ = preference_examples(eval_records, "skip")
    else:
        eval_records = train_records
        train, evals = split_holdout(train, data.eval_size, cfg.run.seed)
    train_tok, dropped = _encode([right for right, _ in judge_examples(train, rubric, cfg.verdicts)], tokenizer, cfg, limit)
    eval_pairs = [(r, w) for r, w in judge_examples(evals, rubric, cfg.verdicts)]
    right_tok, _ = _encode([r for r, _ in eval_pairs], tokenizer, cfg, limit, keep_none=True)
    wrong_tok, _ = _encode([w for _, w in eval_pairs], tokenizer, cfg, limit, keep_none=True)
    margins = gold_margins(eval_records)
    held = HeldOut([], [] if margins is not None else None)
    for n, ex in enumerate(evals):  # a pair is kept whole (both orders) or not at all
        both = [(right_tok[2 * n + k], wrong_tok[2 * n + k]) for k in (0, 1)]
        if all(r is not None and w is not None for r, w in both):
            held.examples.extend(both)
            if margins is not None:
                held.gold_margins.append(margins[ex.source, ex.row])
    if not train_tok:
        raise DataError(f"'{data.train}' (data.train): no judge example fits within {limit.tokens} tokens with the "
                        "rubric; raise data.max_length or shorten the rubric.")
    if dropped:
        notice(f"{dropped} of {2 * len(train)} judge examples dropped as longer than {limit.tokens} tokens.")
    counts = {"pairs": len(train), "identical_skipped": counts.get("identical_skipped", 0), "dropped_long": dropped,
              "eval_pairs": len(evals)}
    return tokenizer, config, train_tok, held, counts, limit


def _encode(examples, tokenizer, cfg, limit: LengthLimit, keep_none: bool = False):
    out = [tokenize_sft(ex, tokenizer, limit.tokens, cfg.model.chat_template, cfg.data.on_long, limit.capped_by)
           for ex in examples]
    return (out if keep_none else [t for t in out if t is not None]), sum(t is None for t in out)


def genrm_stage_inputs(cfg: GenRMConfig) -> StageInputs:
    tokenizer, _, train, held, counts, limit = genrm_inputs(cfg)
    return StageInputs(tokenizer, train, [right for right, _ in held.examples], counts, {"data.max_length": limit},
                       extra={"held": held})


@dataclass
class HeldOut:
    """Held-out judge examples: ``examples``, (right, wrong) tokenized pairs, two per preference pair
    (chosen as A, then chosen as B); ``gold_margins``, per preference pair the gold judge's
    ``gold_chosen - gold_rejected`` when the file carries them (a synthetic task's), else None."""

    examples: list
    gold_margins: list[float] | None

    def __bool__(self) -> bool:
        return bool(self.examples)


@torch.no_grad()
def verdict_accuracy(model, held: HeldOut, pad_id: int, batch_size: int, autocast: str = "none") -> dict:
    """The held-out verdicts, teacher-forced: :func:`verdict_metrics` of which verdict is likelier."""
    right = _summed_logprobs(model, [r for r, _ in held.examples], pad_id, batch_size, autocast)
    wrong = _summed_logprobs(model, [w for _, w in held.examples], pad_id, batch_size, autocast)
    return verdict_metrics((right > wrong).tolist(), held.gold_margins)


def verdict_metrics(right: list[bool], margins: list[float] | None = None) -> dict:
    """From whether each held-out verdict (two per pair: chosen as A, chosen as B) was right:
    ``eval/verdict_accuracy`` (per verdict), ``eval/pair_accuracy`` (right in both orders),
    ``eval/position_bias`` (the same position picked in both orders); with the gold judge's margins,
    ``eval/gold_agreement`` of the judge's pair outcomes (:func:`pairwise_outcome`: position-biased
    pairs count half) and ``eval/labels_gold_agreement``, the file's own labels', both over the pairs
    gold does not tie (:func:`gold_agreement`)."""
    outcomes = [pairwise_outcome("A" if right[i] else "B", "B" if right[i + 1] else "A")
                for i in range(0, len(right) - 1, 2)]
    out = {"eval/verdict_accuracy": sum(right) / max(len(right), 1),
           "eval/pair_accuracy": sum(o == 1.0 for o, _ in outcomes) / max(len(outcomes), 1),
           "eval/position_bias": sum(biased for _, biased in outcomes) / max(len(outcomes), 1)}
    if margins is not None:
        judged, _ = gold_agreement([o for o, _ in outcomes], margins)
        labels, decided = gold_agreement([1.0] * len(outcomes), margins)
        if decided:
            out.update({"eval/gold_agreement": judged, "eval/labels_gold_agreement": labels,
                        "eval/gold_pairs": float(decided)})
    return out


def _summed_logprobs(model, examples, pad_id: int, batch_size: int, autocast: str) -> torch.Tensor:
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        batch = to_device(collate_right([t.input_ids for t in chunk], pad_id, [t.loss_mask for t in chunk]), device)
        logp = sequence_logprobs(model, batch["input_ids"], batch["attention_mask"], autocast)
        out.append((logp * batch["loss_mask"][:, 1:]).sum(1).float().cpu())
    return torch.cat(out) if out else torch.zeros(0)


def build_genrm_roles(cfg: GenRMConfig, checkpoint=None, needed=(), inputs: StageInputs | None = None,
                      total_steps: int | None = None) -> StageRoles:
    """The judge being trained as the policy role: SFT's loss on the verdicts, and the verdict accuracy held out."""
    inputs = inputs or genrm_stage_inputs(cfg)
    held = inputs.extra["held"]

    def accuracy(engine, pad, autocast) -> dict:
        return engine.infer(verdict_accuracy, held, pad, cfg.optim.batch_size, autocast)

    return response_lm_roles(cfg, inputs, checkpoint, total_steps, extra_eval=accuracy if held else None)


GENRM = StageBody(name="genrm", role="policy", inputs=genrm_stage_inputs, build=build_genrm_roles,
                  counted=("train_examples", "eval_examples"))


@guarded_run
def run_genrm(cfg: GenRMConfig, resume: bool = False) -> dict:
    """Train the judge, evaluate it, save ``run.out`` as a Hugging Face checkpoint; return final metrics."""
    return run_stage(cfg, GENRM, resume)


def plan_inputs(cfg):
    """The judge's inputs as its dry run reads them."""
    tokenizer, config, train, held, counts, _ = genrm_inputs(cfg)
    return tokenizer, {cfg.model.name_or_path: config}, train, [right for right, _ in held.examples], counts
