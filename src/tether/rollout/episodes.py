"""Multi-turn episodes over a generation engine: the rollout role of a run with an environment.

Each prompt row starts one episode (``environment.reset(row)``: its opening messages and the tools
it offers, rendered with the chat template into the prompt ids). Then, turn by turn, the engine
samples the next assistant turn of every episode still going (one batched ``generate`` over their
whole sequences so far), each environment answers its episode's turn, and the answer's tokens are
appended (:mod:`tether.rollout.episode_tokens`: the sampled ids verbatim, the observation as the
chat template renders that turn). An episode ends when its environment says so, after
``max_turns`` assistant turns, or when it holds ``max_tokens`` response tokens (the last two:
truncated).

The result is one :class:`Rollout`: the prompt left-padded, the response (every sampled and
observation token) right-padded, ``action_mask`` 1 on the sampled tokens only, the engine's
log-probs on them (when it captured them), ``ended`` (the episode finished, not truncated, and its
last turn ended on the stop token), ``token_rewards`` (each turn's reward from the
environment on that turn's last sampled token) and one :class:`EpisodeRecord` per episode.
``responses`` holds each episode's final assistant turn (what a reward function or judge scores as
the answer); a reward model reads the whole sequence, observations included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from tether.common import dispatch
from tether.data import collate_left, encode_chat
from tether.environments.base import EnvironmentSettings, EpisodeStats, Episodes
from tether.rollout.base import SamplingParams
from tether.rollout.episode_tokens import EpisodeTokens, observation_ids
from tether.types import Rollout


@dataclass(frozen=True)
class EpisodeSpec:
    """Everything an :class:`EpisodeEngine` is built from, in plain picklable values (a sampling
    worker in a process of its own builds its episode engine from it): the environment kind's
    registered name, what the kind is handed, the turn cap and the response-token budget."""

    kind: str
    settings: EnvironmentSettings
    max_turns: int
    max_tokens: int

    @classmethod
    def of(cls, env, max_new_tokens: int) -> "EpisodeSpec":
        """The spec of an ``environment`` config block (:class:`tether.config.environment.
        EnvironmentConfig`) sampling ``max_new_tokens`` per turn (the episode's budget defaults to
        max_turns x max_new_tokens)."""
        from tether.registry.environments import parse_environment_args

        settings = EnvironmentSettings(env.max_turns, env.tool_targets(), env.tool_timeout_s, env.tool_workers,
                                       parse_environment_args(env.args, env.kind))
        return cls(env.kind, settings, env.max_turns, env.budget(max_new_tokens))

    def wrap(self, engine, tokenizer) -> "EpisodeEngine":
        """``engine`` sampling this kind's episodes (one environment per episode)."""
        from tether.registry.environments import environment_spec

        episodes = environment_spec(self.kind, "environment.kind").load().episodes(self.settings)
        return EpisodeEngine(engine, tokenizer, episodes, self.max_turns, self.max_tokens)


@dataclass
class EpisodeRecord:
    """One episode as it went: its totals (turns, counters, truncation) and its messages."""

    stats: EpisodeStats
    messages: list[dict]
    turn_rewards: list[float | None] = field(default_factory=list)


@dataclass
class _Episode:
    env: object
    messages: list[dict]
    tokens: EpisodeTokens
    stats: EpisodeStats = field(default_factory=EpisodeStats)
    turn_rewards: list[float | None] = field(default_factory=list)
    done: bool = False
    stopped: bool = False  # the last turn ended on the engine's stop token (not cut by the length cap)

    def finish(self, truncated: bool = False) -> None:
        self.done = True
        if truncated:
            self.stats = replace(self.stats, truncated=True)


class EpisodeEngine:
    """Episodes of ``environments`` (one environment per episode) sampled with ``engine``.

    Every other attribute (``sync_weights``, ``close``, ...) is the engine's own.
    """

    def __init__(self, engine, tokenizer, environments: Episodes, max_turns: int, max_tokens: int):
        self.engine, self.tokenizer, self.environments = engine, tokenizer, environments
        self.max_turns, self.max_tokens = max_turns, max_tokens

    def __getattr__(self, name: str):
        return getattr(self.__dict__["engine"], name)

    def close(self) -> None:
        self.environments.close()
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    def start(self, row: dict, where: str) -> _Episode:
        """An episode from one prompt row: its environment reset, its prompt ids rendered."""
        env = self.environments()
        messages = env.reset(row, where)
        return _Episode(env, list(messages), EpisodeTokens(encode_chat(messages, self.tokenizer, env.tools or None)))

    @dispatch.prompts
    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step=None,
                 rows: list[dict] | None = None) -> Rollout:
        """One episode per row of ``rows`` (prompt rows; ``prompts``: their text, for the record);
        ``prompt_ids`` are not read: each episode renders its opening with the tools its environment
        offers. ``seed``: seed torch first; ``chunk_size``: the engine's batch per turn. Declared
        ``@prompts``: a placement gives each worker its share of the prompts and of ``rows`` (a
        prompt-aligned argument) and joins the episodes in order. ``on_step`` (per-step hooks) is not
        run in episodes."""
        if rows is None or len(rows) != len(prompts):
            raise ValueError("EpisodeEngine.generate needs the prompt rows, one per prompt (rows=...)")
        if on_step is not None:
            raise ValueError("EpisodeEngine.generate runs no per-step hooks (on_step): episodes end by their "
                             "environment and budgets")
        if seed is not None:
            torch.manual_seed(seed)
        episodes = [self.start(row, f"prompt row {i}") for i, row in enumerate(rows)]
        for turn in range(self.max_turns):
            going = [i for i, e in enumerate(episodes) if not e.done]
            if not going:
                break
            sampled = self.engine.generate([episodes[i].tokens.ids for i in going], [prompts[i] for i in going], params,
                                           chunk_size=chunk_size)
            for row, i in enumerate(going):
                self.answer(episodes[i], sampled, row, last_turn=turn == self.max_turns - 1)
        return self.assemble(episodes, prompts)

    def answer(self, episode: _Episode, sampled: Rollout, row: int, last_turn: bool) -> None:
        """Append row ``row`` of ``sampled`` to ``episode``, let its environment answer, append that."""
        n = int(sampled.response_mask[row].sum())
        ids = sampled.response_ids[row, :n].tolist()
        logprobs = None if sampled.sampled_logprobs is None else sampled.sampled_logprobs[row, :n].tolist()
        episode.tokens.add_sampled(ids, logprobs, max_tokens=self.max_tokens)
        episode.stopped = bool(sampled.ended[row]) and not episode.tokens.truncated
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        episode.messages.append({"role": "assistant", "content": text})
        if episode.tokens.truncated:
            return episode.finish(truncated=True)
        step = episode.env.step(text)
        episode.stats = episode.stats.plus(step)
        episode.turn_rewards.append(step.reward)
        if step.done or last_turn:
            return episode.finish(truncated=step.truncated or not step.done)
        more = observation_ids(self.tokenizer, episode.messages, step.observation, episode.env.tools or None,
                               sampled_ids=ids)
        if not episode.tokens.add_observation(more, max_tokens=self.max_tokens):
            return episode.finish(truncated=True)
        episode.messages += step.observation

    def assemble(self, episodes: list[_Episode], prompts: list[str]) -> Rollout:
        """The episodes as one rollout (module docstring)."""
        pad = self.tokenizer.pad_token_id
        prompt_ids, prompt_mask = collate_left([e.tokens.prompt_ids for e in episodes], pad)
        width = max(len(e.tokens.response_ids) for e in episodes)

        def right(values: list[list], fill, dtype) -> torch.Tensor:
            return torch.tensor([v + [fill] * (width - len(v)) for v in values], dtype=dtype)

        response_ids = right([e.tokens.response_ids for e in episodes], pad, torch.long)
        response_mask = right([[1] * len(e.tokens.response_ids) for e in episodes], 0, torch.long)
        action_mask = right([e.tokens.action_mask for e in episodes], 0, torch.long)
        logprobs = None
        if all(e.tokens.engine_logprobs is not None for e in episodes):
            logprobs = right([e.tokens.engine_logprobs for e in episodes], 0.0, torch.float32)
        return Rollout(
            prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, response_mask=response_mask,
            ended=torch.tensor([e.stopped and not e.stats.truncated for e in episodes]), prompts=list(prompts),
            responses=[final_answer(e.messages) for e in episodes], sampled_logprobs=logprobs,
            action_mask=action_mask, token_rewards=turn_rewards(episodes, width),
            episodes=[EpisodeRecord(e.stats, e.messages, e.turn_rewards) for e in episodes])


def final_answer(messages: list[dict]) -> str:
    """The text of the episode's last assistant turn (stripped, as single-turn responses are)."""
    return next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "").strip()


def turn_rewards(episodes: list[_Episode], width: int) -> torch.Tensor | None:
    """(B, width) each turn's reward on its last sampled token, 0 elsewhere; None when no
    environment gave any reward."""
    if all(r is None for e in episodes for r in e.turn_rewards):
        return None
    out = torch.zeros(len(episodes), width)
    for row, episode in enumerate(episodes):
        for (start, end), reward in zip(episode.tokens.turns, episode.turn_rewards):
            if reward is not None and end > start:
                out[row, end - 1] = reward
    return out
