"""The models behind the server and the work the batcher's thread runs: sample and score.

Generation is the generation engine training uses (``--engine``, lean by default) on a
left-padded batch. A per-step hook follows every row as tokens arrive (with ``--engine vllm``
it is replayed over each finished batch: vLLM's offline engine returns whole responses): it decodes the row's text, cuts it at a stop sequence, enforces
the row's own ``max_tokens`` (rows of one batch may differ), hands streamed text to the
request, and tells the engine which rows are finished, so a row that hits a stop sequence
stops costing compute. A request with a ``seed`` runs alone under a forked RNG seeded with
it, so the same request with the same seed gives the same answer whatever else is running.

Scores come from :class:`~tether.roles.reward.ModelReward`, the same code PPO uses locally:
the head at the last real token, minus the model's stored offset.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from tether.data import collate_left, collate_right
from tether.rollout import SamplingParams
from tether.models import context_length, load_causal_lm, load_scalar_model, load_tokenizer
from tether.serve.batcher import Job
from tether.serve.textstream import TextAssembler
from tether.types import Rollout

log = logging.getLogger(__name__)

SCORE_CHUNK = 64  # sequences per reward-model forward pass


def eos_ids(model, tokenizer) -> list[int]:
    """Every token that ends a response: the tokenizer's EOS and the generation config's."""
    ids = {int(tokenizer.eos_token_id)}
    gen = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update([gen] if isinstance(gen, int) else list(gen or []))
    return sorted(ids)


@dataclass
class Sample:
    """One sampled sequence."""

    text: str
    finish_reason: str  # "stop" (EOS or a stop sequence) or "length" (max_tokens)
    completion_tokens: int  # generated tokens, EOS included
    score: float | None = None


@dataclass(eq=False, kw_only=True)
class GenJob(Job):
    """Sample ``candidates`` sequences for each prompt (already token ids)."""

    prompts: list[list[int]]
    candidates: int
    max_tokens: list[int]  # per prompt
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    reward_prompts: list[list[int]] | None = None  # reward-model ids per prompt: score the samples
    on_delta: Callable[[str], None] | None = None  # streamed text (single-sequence jobs)

    def __post_init__(self):
        self.rows = len(self.prompts) * self.candidates
        greedy = self.temperature == 0
        # Only the same sampling settings can share a generate call; seeded jobs run alone.
        self.key = None if self.seed is not None else ("generate", greedy, self.temperature, self.top_p)


@dataclass(eq=False, kw_only=True)
class ScoreJob(Job):
    """Reward-model scores of (prompt ids, response ids) pairs in the reward tokenizer."""

    pairs: list[tuple[list[int], list[int]]]

    def __post_init__(self):
        self.rows = len(self.pairs)
        self.key = ("score",)


@dataclass
class _Row:
    """One sequence being generated, followed token by token."""

    job: GenJob
    prompt_index: int
    prompt_ids: list[int]
    max_tokens: int
    text: TextAssembler
    eos: frozenset
    tokens: int = 0
    done: bool = False
    finish_reason: str = "length"
    score: float | None = field(default=None)

    def push(self, token: int) -> None:
        self.tokens += 1
        if self.job.cancelled:
            self.done = True
        elif token in self.eos:
            self._end("stop", self.text.finish())
        else:
            delta = self.text.add(token)
            if self.text.stopped:
                self._end("stop", delta)
            elif self.tokens >= self.max_tokens:
                self._end("length", delta + self.text.finish())
            else:
                self._emit(delta)

    def close(self) -> None:
        """Generation ended without this row finishing (it reached the batch's length cap)."""
        if not self.done:
            self._end("length", self.text.finish())

    def _end(self, reason: str, delta: str) -> None:
        self.done, self.finish_reason = True, reason
        self._emit(delta)

    def _emit(self, delta: str) -> None:
        if delta and self.job.on_delta is not None:
            self.job.emitted = True
            self.job.on_delta(delta)


class _FollowRows:
    """The generation engine's per-step hook: feeds each new token to its row; rows that are
    done (EOS, a stop sequence, their own max_tokens, a cancelled request) stop generating."""

    def __init__(self, rows: list[_Row]):
        self.rows = rows

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        for row, token in zip(self.rows, tokens.tolist()):
            if not row.done:
                row.push(token)
        return torch.tensor([row.done for row in self.rows], dtype=torch.bool)


class ModelService:
    """The policy (and optional reward model) with their tokenizers; runs batches of jobs."""

    def __init__(self, model, tokenizer, reward_model=None, reward_tokenizer=None, max_batch_size: int = 32,
                 engine: str = "lean", settings=None, path: str | None = None, engine_options=None):
        from tether.eval.policies import measured_policy, measured_reward

        self.tokenizer = tokenizer
        self.context = context_length(model)
        self.eos = eos_ids(model, tokenizer)
        self.max_batch_size = max_batch_size
        # Sampling goes through the generation engine training uses (rollout.engine).
        # vLLM loads the checkpoint at ``path`` itself (its own copy of the weights).
        self.sampler = measured_policy(model, tokenizer, 1.0, engine, settings, path, engine_options).sampler
        self.model = model
        self.reward = measured_reward(reward_model, settings) if reward_model is not None else None
        self.reward_tokenizer = reward_tokenizer if reward_model is not None else None
        self.reward_context = context_length(reward_model) if reward_model is not None else None

    @classmethod
    def load(cls, model: str, reward_model: str | None = None, dtype: str = "float32",
             trust_remote_code: bool = False, max_batch_size: int = 32, engine: str = "lean",
             settings=None, engine_options=None) -> "ModelService":
        """Load a policy checkpoint (any HF causal LM) and optionally a scalar-head reward model."""
        tokenizer = load_tokenizer(model, key="--model")
        policy = load_causal_lm(model, tokenizer, dtype, trust_remote_code=trust_remote_code, key="--model")
        rm = rm_tok = None
        if reward_model:
            rm_tok = load_tokenizer(reward_model, key="--reward-model")
            rm = load_scalar_model(reward_model, rm_tok, dtype, trust_remote_code=trust_remote_code,
                                   key="--reward-model")
        return cls(policy, tokenizer, rm, rm_tok, max_batch_size, engine, settings, model, engine_options)

    def close(self) -> None:
        """Release an engine with processes of its own (vLLM's engine core); the server calls it on shutdown."""
        close = getattr(self.sampler, "close", None)
        if callable(close):
            close()

    def failure(self) -> str | None:
        """Why the generation engine has stopped for good (vLLM's engine died: its reason), or None
        while it can generate. In-process engines never stop."""
        failure = getattr(self.sampler, "failure", None)
        return failure() if callable(failure) else None

    @property
    def has_reward(self) -> bool:
        return self.reward is not None

    # -- the batcher's entry point (worker thread) --------------------------------------------
    def run_batch(self, jobs: list[Job]) -> list:
        if isinstance(jobs[0], ScoreJob):
            scores = self.score([pair for job in jobs for pair in job.pairs])
            out, start = [], 0
            for job in jobs:
                out.append(scores[start : start + job.rows])
                start += job.rows
            return out
        return self.generate(jobs)

    # -- generation ------------------------------------------------------------------------------
    def generate(self, jobs: list[GenJob]) -> list[list[list[Sample]]]:
        """Per job, per prompt, its candidates. All jobs share the first one's sampling settings."""
        rows = [
            _Row(job, i, ids, job.max_tokens[i], TextAssembler(self.tokenizer, job.stop, job.on_delta is not None),
                 frozenset(self.eos))
            for job in jobs for i, ids in enumerate(job.prompts) for _ in range(job.candidates)
        ]
        first = jobs[0]
        with torch.random.fork_rng(devices=[], enabled=first.seed is not None):
            if first.seed is not None:
                torch.manual_seed(first.seed)
            for start in range(0, len(rows), self.max_batch_size):
                self._sample(rows[start : start + self.max_batch_size], first.temperature, first.top_p)
        self._score_rows([r for r in rows if r.job.reward_prompts is not None])
        results = []
        for job in jobs:
            per_prompt: list[list[Sample]] = [[] for _ in job.prompts]
            for row in rows:
                if row.job is job:
                    per_prompt[row.prompt_index].append(
                        Sample(row.text.text, row.finish_reason, row.tokens, row.score))
            results.append(per_prompt)
        return results

    @torch.no_grad()
    def _sample(self, rows: list[_Row], temperature: float, top_p: float) -> None:
        live = [r for r in rows if not r.job.cancelled]
        for r in rows:
            if r.job.cancelled:
                r.done = True
        if not live:
            return
        # OpenAI sampling has no top-k; temperature 0 is greedy decoding.
        params = SamplingParams(max_new_tokens=max(r.max_tokens for r in live), temperature=temperature or 1.0,
                                top_k=0, top_p=top_p, greedy=temperature == 0)
        self.sampler.generate([r.prompt_ids for r in live], [""] * len(live), params, on_step=_FollowRows(live))
        for r in live:
            r.close()

    # -- scoring ---------------------------------------------------------------------------------
    def _score_rows(self, rows: list[_Row]) -> None:
        if not rows:
            return
        pairs = [
            (r.job.reward_prompts[r.prompt_index], self.reward_response_ids(r.text.text, r.finish_reason == "stop"))
            for r in rows
        ]
        for r, s in zip(rows, self.score(pairs)):
            r.score = s

    def reward_response_ids(self, text: str, ended: bool) -> list[int]:
        """A response in the reward tokenizer: its tokens, then EOS when it ended."""
        ids = list(self.reward_tokenizer(text, add_special_tokens=False).input_ids)
        return ids + [int(self.reward_tokenizer.eos_token_id)] if ended else ids

    @torch.no_grad()
    def score(self, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
        """Reward scores of (prompt ids, response ids) pairs, in order."""
        tok, out = self.reward_tokenizer, []
        for start in range(0, len(pairs), SCORE_CHUNK):
            chunk = [self._fit(p, r) for p, r in pairs[start : start + SCORE_CHUNK]]
            prompt_ids, prompt_mask = collate_left([p for p, _ in chunk], tok.pad_token_id)
            resp = collate_right([r for _, r in chunk], tok.pad_token_id)
            rollout = Rollout(prompt_ids, prompt_mask, resp["input_ids"], resp["attention_mask"],
                              ended=torch.ones(len(chunk), dtype=torch.bool), prompts=[""] * len(chunk),
                              responses=[""] * len(chunk))
            out.extend(float(s) for s in self.reward.score(rollout))
        return out

    def _fit(self, prompt: list[int], response: list[int]) -> tuple[list[int], list[int]]:
        """Cut a response that would run past the reward model's context (scored as cut)."""
        if self.reward_context is not None and len(prompt) + len(response) > self.reward_context:
            response = response[: max(0, self.reward_context - len(prompt))]
        return prompt, response
