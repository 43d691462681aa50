"""What the RL loop sets up from a config, apart from the roles: the prompt set and its length
limit, sampling parameters, the KL controller, the score shaping, the held-out evaluator, and
the seeded order in which iterations draw prompts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from tether.algos import AdaptiveKLController, FixedKLController, RunningMoments
from tether.algos.reward_terms import combine_terms, term_means
from tether.config import RLConfig
from tether.data import encode_prompt, load_records, prompt_examples, prompt_text
from tether.common.errors import DataError
from tether.loops.common import LengthLimit, fit_to_context, notice
from tether.common.targets import import_callable
from tether.rollout import SamplingParams
from tether.common.runtime import rank_seed


@dataclass
class PromptSet:
    ids: list[list[int]]  # token ids per prompt, chat template applied
    texts: list[str]  # plain text per prompt, for judges and logs
    dropped_long: int


def load_prompt_set(source: str, split: str, tokenizer, chat_template: str, max_length: int | LengthLimit,
                    limit: int | None = None, key: str = "prompts") -> PromptSet:
    """Encoded prompts of ``source`` (config ``key``); longer than ``max_length`` tokens: dropped, counted."""
    cap = max_length if isinstance(max_length, LengthLimit) else LengthLimit(max_length)
    examples = prompt_examples(load_records(source, split, key=key))
    if limit:
        examples = examples[:limit]
    ids, texts, dropped = [], [], 0
    for ex in examples:
        encoded = encode_prompt(ex.prompt, tokenizer, chat_template)
        if len(encoded) > cap.tokens:
            dropped += 1
            continue
        ids.append(encoded)
        texts.append(prompt_text(ex.prompt))
    why = f" ({cap.capped_by})" if cap.capped_by else ""
    if not ids:
        raise DataError(f"'{source}' ({key}): no prompt is within rollout.max_prompt_length={cap.tokens} tokens{why}.")
    if cap.capped_by and dropped:
        notice(f"{dropped} of {len(examples)} prompts of '{source}' ({key}) dropped as longer than {cap.tokens} "
               f"tokens{why}.")
    return PromptSet(ids, texts, dropped)


def prompt_limit(cfg: RLConfig, contexts: dict[str, int | None]) -> LengthLimit:
    """rollout.max_prompt_length, capped so that a prompt and rollout.max_new_tokens fit every
    model (``contexts``: model name -> context length, from the roles)."""
    return fit_to_context(cfg.rollout.max_prompt_length, "rollout.max_prompt_length", contexts,
                          cfg.rollout.max_new_tokens, "rollout.max_new_tokens")


def sampling_params(cfg: RLConfig) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(r.max_new_tokens, r.min_new_tokens, r.temperature, r.top_k, r.top_p)


def kl_controller(cfg: RLConfig):
    k = cfg.kl
    if k.controller == "adaptive":
        return AdaptiveKLController(k.coef, k.target, k.horizon)
    return FixedKLController(k.coef)


class ScoreNormalizer:
    """Scale scores by the first batch's (``first_batch``) or a running (``running``) mean/std."""

    def __init__(self, mode: str):
        self.mode = mode
        self.moments = RunningMoments()
        self.frozen: tuple[float, float] | None = None

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        if self.mode == "none":
            return scores
        if self.mode == "first_batch":
            if self.frozen is None:
                std = float(scores.std()) if scores.numel() > 1 else 1.0
                self.frozen = (float(scores.mean()), std if std > 1e-6 else 1.0)
            mean, std = self.frozen
        else:
            self.moments.update(scores)
            mean, std = self.moments.mean, max(self.moments.std, 1e-6)
        return (scores - mean) / std

    def state_dict(self) -> dict:
        return {"mode": self.mode, "frozen": self.frozen, "moments": self.moments.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.frozen = tuple(state["frozen"]) if state["frozen"] is not None else None
        self.moments.load_state_dict(state["moments"])


def score_rollout(reward, rollout, cfg: RLConfig, device) -> tuple[torch.Tensor, dict[str, float]]:
    """The reward role's (B,) raw scores of ``rollout`` in float32 on ``device``: every source answers
    its terms' scores ((B, T) from one ``score_terms`` call; one term for a single source), weighed
    here; with ``reward.terms``, each term's batch mean ``reward/<name>`` too."""
    names, weights = cfg.reward.term_weights()
    per_term = reward.score_terms(rollout)
    logged = term_means(per_term, names) if cfg.reward.terms else {}
    return combine_terms(per_term, weights).to(device), logged


def shape_scores(raw: torch.Tensor, ended: torch.Tensor, normalize: "ScoreNormalizer", cfg: RLConfig) -> torch.Tensor:
    """(B,) raw scores -> the scores PPO uses: normalised, the EOS penalty, clipped."""
    score = normalize(raw.float())
    if cfg.reward.eos_penalty is not None:
        # A response cut at the length cap is not judged: it gets a fixed penalty (N+ study).
        score = torch.where(ended.to(score.device), score, torch.full_like(score, cfg.reward.eos_penalty))
    if cfg.reward.clip is not None:
        score = score.clamp(-cfg.reward.clip, cfg.reward.clip)
    return score


def build_evaluator(cfg: RLConfig, tokenizer, max_length: LengthLimit | None = None):
    """The held-out evaluator of ``cfg.eval`` (None when no prompts are configured)."""
    from tether.eval.held_out import HeldOutEvaluator

    if not cfg.eval.prompts:
        return None
    held = load_prompt_set(cfg.eval.prompts, "test", tokenizer, cfg.model.chat_template,
                           max_length or cfg.rollout.max_prompt_length, limit=cfg.eval.max_prompts, key="eval.prompts")
    judge = import_callable(cfg.eval.judge, "eval.judge") if cfg.eval.judge else None
    return HeldOutEvaluator(held.ids, held.texts, sampling_params(cfg), cfg.run.seed, judge)


def iteration_seed(seed: int, iteration: int) -> int:
    """The torch seed of iteration ``iteration`` (on this rank): every draw of an iteration derives from it."""
    return rank_seed(seed, iteration)


def prompt_indices(n: int, batch_size: int, iteration: int, seed: int) -> list[int]:
    """Indices of iteration ``iteration``'s prompts: consecutive slices of per-pass shuffles."""
    orders: dict[int, list[int]] = {}
    out = []
    for k in range(iteration * batch_size, (iteration + 1) * batch_size):
        pass_idx, j = divmod(k, n)
        if pass_idx not in orders:
            orders[pass_idx] = random.Random(seed * 1_000_003 + pass_idx).sample(range(n), n)
        out.append(orders[pass_idx][j])
    return out
