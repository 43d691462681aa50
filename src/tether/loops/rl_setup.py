"""What the RL loop sets up from a config, apart from the roles: the prompt set and its length
limit, sampling parameters, the KL controller, the score shaping, the held-out evaluator, and
the seeded order in which iterations draw prompts."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import torch

from tether.algos import AdaptiveKLController, FixedKLController, RunningMoments, episode_totals
from tether.algos.reward_terms import term_means
from tether.config import RLConfig
from tether.config.environment import episode_budget
from tether.data import encode_chat, encode_prompt, load_records, prompt_examples, prompt_text
from tether.common.errors import DataError
from tether.environments.base import opening_messages
from tether.registry.environments import environment_spec
from tether.loops.common import LengthLimit, fit_to_context, notice
from tether.loops.reward_objectives import RewardObjectives
from tether.registry.rewards import kind_of
from tether.common.targets import import_callable
from tether.rollout import SamplingParams
from tether.algos.masked import zero_padding
from tether.types import Experience, Rollout
from tether.common.runtime import rank_seed


@dataclass
class PromptSet:
    ids: list[list[int]]  # token ids per prompt, chat template applied
    texts: list[str]  # plain text per prompt, for judges and logs
    dropped_long: int
    rows: list[dict] | None = None  # the prompt rows an environment starts its episodes from (episodes only)


def load_prompt_set(source: str, split: str, tokenizer, chat_template: str, max_length: int | LengthLimit,
                    limit: int | None = None, key: str = "prompts", environment: type | None = None) -> PromptSet:
    """Encoded prompts of ``source`` (config ``key``); longer than ``max_length`` tokens: dropped, counted.
    With ``environment`` (an environment kind's class), every row is checked by it before any
    training and kept for its episodes, and the prompt is its opening messages with its tools."""
    cap = max_length if isinstance(max_length, LengthLimit) else LengthLimit(max_length)
    records = load_records(source, split, key=key)
    if environment is None:
        examples = prompt_examples(records)
        encoded_rows = [(encode_prompt(ex.prompt, tokenizer, chat_template), prompt_text(ex.prompt), None)
                        for ex in (examples[:limit] if limit else examples)]
    else:
        encoded_rows = [episode_prompt(rec, tokenizer, environment) for rec in (records[:limit] if limit else records)]
    kept = [row for row in encoded_rows if len(row[0]) <= cap.tokens]
    ids, texts, rows = [r[0] for r in kept], [r[1] for r in kept], [r[2] for r in kept]
    dropped = len(encoded_rows) - len(kept)
    why = f" ({cap.capped_by})" if cap.capped_by else ""
    if not ids:
        raise DataError(f"'{source}' ({key}): no prompt is within rollout.max_prompt_length={cap.tokens} tokens{why}.")
    if cap.capped_by and dropped:
        notice(f"{dropped} of {len(encoded_rows)} prompts of '{source}' ({key}) dropped as longer than {cap.tokens} "
               f"tokens{why}.")
    return PromptSet(ids, texts, dropped, rows if environment is not None else None)


def environment_class(cfg: RLConfig) -> type | None:
    """The class of ``environment.kind`` (it checks the prompt rows), or None for single-turn rollouts."""
    if not cfg.environment.enabled:
        return None
    return environment_spec(cfg.environment.kind, "environment.kind").load()


def episode_prompt(rec, tokenizer, environment: type) -> tuple[list[int], str, dict]:
    """(prompt ids, prompt text, the row) of one episode's prompt row, checked by its environment
    kind (a DataError naming the file and row): the opening messages with the tools it offers."""
    where = f"{rec.source}, row {rec.row}"
    if not isinstance(rec.data, dict):
        raise DataError(f"{where}: expected a JSON object per row.")
    environment.check_row(rec.data, where)
    env_messages = opening_messages(rec.data, where)
    return encode_chat(env_messages, tokenizer, rec.data.get("tools") or None), prompt_text(env_messages), rec.data


def prompt_limit(cfg: RLConfig, contexts: dict[str, int | None]) -> LengthLimit:
    """rollout.max_prompt_length, capped so that a prompt and rollout.max_new_tokens (an episode's
    response budget, with an environment) fit every model (``contexts``: model name -> context length,
    from the roles)."""
    if cfg.environment.enabled:
        return fit_to_context(cfg.rollout.max_prompt_length, "rollout.max_prompt_length", contexts,
                              episode_budget(cfg), "environment.max_tokens")
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


def score_rollout(reward, rollout, cfg: RLConfig, device, objectives: RewardObjectives | None = None
                  ) -> tuple[torch.Tensor, dict[str, float], Rollout]:
    """The reward role's (B,) raw scores of ``rollout`` in float32 on ``device``: every source answers
    its terms' scores ((B, T) from one ``score_terms`` call; one term for a single source), combined
    by ``objectives`` (the run's, with its state; a fixed-weight sum without one), or zeros without a
    reward role; with
    ``reward.terms``, each term's batch mean ``reward/<name>``, the objectives' and constraints'
    stats, and what each reporting term (a judge) did this batch; and the rollout, with the dense
    terms' weighted rewards (a PRM's step scores) added to its ``token_rewards`` where the algorithm
    reads rewards per token (:func:`reads_dense_rewards`); those terms are then left out of the score."""
    if reward is None:  # an algorithm trained without a reward (its registry entry's needs_reward)
        return torch.zeros(len(rollout.responses), device=device), {}, rollout
    objectives = objectives if objectives is not None else RewardObjectives(cfg.reward.terms)
    dense = cfg.reward.dense_terms() if reads_dense_rewards(cfg) else []
    if dense:
        per_term, tokens = reward.score_terms_and_tokens(rollout)
        rollout = with_token_rewards(rollout, tokens)
        score, stats = objectives(per_term.index_fill(1, torch.tensor(dense), 0.0))
    else:
        per_term = reward.score_terms(rollout)
        score, stats = objectives(per_term)
    logged = term_means(per_term, objectives.names) if cfg.reward.terms else {}
    if reward_reports(cfg):
        logged.update(reward.metrics())
    return score.to(device), {**logged, **stats}, rollout


def with_token_rewards(rollout: Rollout, tokens: torch.Tensor) -> Rollout:
    """``rollout`` with (B, A) ``tokens`` added to its ``token_rewards`` (an environment's per-turn
    rewards, when it has them), 0 off the sampled tokens."""
    tokens = zero_padding(tokens.float(), rollout.loss_mask.to(tokens.device).bool())
    if rollout.token_rewards is not None:
        tokens = rollout.token_rewards.to(tokens) + tokens
    return dataclasses.replace(rollout, token_rewards=tokens)


def reward_reports(cfg: RLConfig) -> bool:
    """Whether a term's kind reports what it did (its registry entry's ``reports``: a judge)."""
    return any(kind_of(term, f"reward.terms[{i}]").reports for i, term in enumerate(cfg.reward.terms))


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
                           max_length or cfg.rollout.max_prompt_length, limit=cfg.eval.max_prompts, key="eval.prompts",
                           environment=environment_class(cfg))
    judge = import_callable(cfg.eval.judge, "eval.judge") if cfg.eval.judge else None
    relative = [t.name for t in cfg.reward.terms if t.judge.enabled and t.judge.mode != "pointwise"]
    if relative:
        notice(f"eval/proxy_score is not logged: reward term {', '.join(relative)} judges a prompt's responses "
               "against each other, and the held-out evaluation samples one response per prompt (its gold score, "
               "KL and the rest are logged).")
    from tether.registry.algorithms import algorithm_spec

    return HeldOutEvaluator(held.ids, held.texts, sampling_params(cfg), cfg.run.seed, judge, held.rows,
                            score_with_reward=not relative and algorithm_spec(cfg.algorithm).needs_reward)


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


def without_truncated(exp: Experience) -> Experience:
    """``exp`` with its truncated episodes out of the loss (``environment.mask_truncated``): their
    rows of the (B, A) action mask zeroed, everything else as it is (their scores already counted
    in their group's baseline; ``env/truncated`` is the fraction masked)."""
    ro = exp.rollout
    truncated = torch.tensor([record.stats.truncated for record in ro.episodes], device=ro.action_mask.device)
    mask = ro.action_mask * (~truncated).to(ro.action_mask.dtype)[:, None]
    return dataclasses.replace(exp, rollout=dataclasses.replace(ro, action_mask=mask))


def reads_dense_rewards(cfg: RLConfig) -> bool:
    """Whether the run's algorithm reads per-token rewards where they fall: its registry entry's
    ``dense_rewards`` (PPO's GAE), or process supervision (``group.advantage=process`` under an
    algorithm whose entry has ``process_advantages``: GRPO)."""
    from tether.registry.algorithms import algorithm_spec

    spec = algorithm_spec(cfg.algorithm)
    return spec.dense_rewards or (spec.process_advantages and cfg.group.advantage == "process")


def with_episode_rewards(score: torch.Tensor, rollout, dense: bool) -> torch.Tensor:
    """(B,) ``score`` with an environment's per-turn rewards (``rollout.token_rewards``): their
    episode total added for an algorithm that takes one score per episode; unchanged for one that
    reads them per token (``dense``, its registry entry's ``dense_rewards``) or without them."""
    if rollout.token_rewards is None or dense:
        return score
    mask = rollout.loss_mask.to(score.device)
    return score + episode_totals(rollout.token_rewards.to(score.device), mask).to(score.dtype)

