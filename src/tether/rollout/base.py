"""The generation-engine interface: token ids in, a :class:`~tether.types.Rollout` out.

Every place that samples from a policy (PPO's rollouts, held-out evaluation, best-of-N, the
sweep, `tether eval`, `tether serve`) goes through this protocol, so the engine chosen by
``rollout.engine`` is the one that samples everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from tether.types import Rollout

if TYPE_CHECKING:
    from tether.rollout.setup import EngineSetup


def truncate_after_eos(responses: torch.Tensor, eos_id: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cut every row after its first EOS.

    responses: (B, A) generated ids. Returns (ids (B, A) with pad after EOS, mask (B, A) with 1
    up to and including the first EOS, ended (B,) bool).
    """
    is_eos = responses == eos_id
    ended = is_eos.any(dim=1)
    # Number of EOS tokens strictly before each position: 0 means "not past the first EOS".
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    mask = (eos_before == 0).long()
    ids = torch.where(mask.bool(), responses, torch.full_like(responses, pad_id))
    return ids, mask, ended


def make_rollout(tok, input_ids, attention_mask, responses, prompts, logps=None, entropies=None) -> Rollout:
    """A :class:`Rollout` from raw sampled ids (B, A): cut after EOS, decode, and attach the
    per-step log-probs/entropies captured while sampling (lists of (B,) tensors) if given."""
    ids, mask, ended = truncate_after_eos(responses, tok.eos_token_id, tok.pad_token_id)
    texts = tok.batch_decode(ids, skip_special_tokens=True)
    rollout = Rollout(
        prompt_ids=input_ids,
        prompt_mask=attention_mask,
        response_ids=ids,
        response_mask=mask,
        ended=ended,
        prompts=list(prompts),
        responses=[t.strip() for t in texts],
    )
    if logps is not None:
        m = mask.float()
        rollout.sampled_logprobs = torch.stack(logps, dim=1) * m
        rollout.sampled_entropy = torch.stack(entropies, dim=1) * m
    return rollout


@dataclass(frozen=True)
class SamplingParams:
    """How responses are sampled. Log-probs for PPO use the same ``temperature``."""

    max_new_tokens: int = 64
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    greedy: bool = False


#: Called after every decode step with the step's (B,) new tokens; returns a (B,) bool tensor of
#: the rows that are finished (stop sequences, per-row limits): they stop generating.
StepHook = Callable[[Tensor], Tensor]


class GenerationEngine(Protocol):
    """Anything that turns prompt ids into responses: the lean loop, HF ``generate``, vLLM.

    Registered by name in :mod:`tether.registry.engines`, whose entry declares what the engine
    can do (holds its own weights, returns entropies, its log-probs switch, its settings block,
    a post-sync check). The class side builds and checks; the instance side samples and syncs.
    """

    @classmethod
    def from_config(cls, setup: "EngineSetup") -> "GenerationEngine":
        """The engine over ``setup`` (:class:`tether.rollout.setup.EngineSetup`): the one
        constructor every caller uses (training, eval, serve, pairs, best-of-N)."""

    @classmethod
    def install_check(cls, setup: "EngineSetup", model_config=None) -> str | None:
        """What would stop the engine on ``setup`` (its install, its settings against the model
        at ``setup.path``; ``model_config`` if already read), raised as a ConfigError before any
        weights load; else a line saying what was checked, or None when there is nothing to check."""

    @classmethod
    def memory_lines(cls, actor_params: int, human_bytes: Callable[[float], str]) -> list[str]:
        """The dry run's lines for memory the engine takes beyond the roles' (``actor_params``:
        the policy's parameter count; ``human_bytes`` formats a byte count)."""

    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step: StepHook | None = None) -> Rollout:
        """Sample one response per prompt. ``prompts`` is the text, carried for judges and logs.

        ``seed``: sample under a private RNG stream seeded with it (the same call, the same
        responses, and the caller's RNG untouched). ``chunk_size``: at most that many prompts per
        forward batch, one after the other in the same stream.
        """

    def sync_weights(self) -> float:
        """Load the actor's current weights (from the setup's ``weights_source``) into an engine
        that holds its own copy; MiB moved. The loop calls it after every update only when the
        engine's entry declares ``holds_own_weights``."""


class SamplesGivenModel:
    """The class side of an engine that samples the model object it is given (lean, hf): built
    from the setup's model, nothing to check before, no memory beyond the actor's, nothing to sync."""

    @classmethod
    def from_config(cls, setup):
        if setup.model is None:
            raise ValueError(f"{cls.__name__} samples a model in this process: the setup has none")
        return cls(setup.model, setup.tokenizer, autocast=setup.autocast, capture=setup.capture,
                   decode_context=setup.decode_context)

    @classmethod
    def install_check(cls, setup, model_config=None) -> str | None:
        return None

    @classmethod
    def memory_lines(cls, actor_params: int, human_bytes) -> list[str]:
        return []

    def sync_weights(self) -> float:
        """Nothing to load: the engine samples from the actor's own model."""
        return 0.0


def generate_chunks(generate_one: Callable[[list, list], Rollout], prompt_ids: list[list[int]], prompts: list[str],
                    seed: int | None, chunk_size: int | None, pad_id: int) -> Rollout:
    """``generate_one`` over chunks of at most ``chunk_size`` prompts in one RNG stream (seeded
    with ``seed`` in a forked RNG when given), concatenated into one rollout."""
    size = chunk_size or max(len(prompt_ids), 1)
    with torch.random.fork_rng(devices=[], enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        parts = [generate_one(prompt_ids[i : i + size], prompts[i : i + size]) for i in range(0, len(prompt_ids), size)]
    return parts[0] if len(parts) == 1 else concat_rollouts(parts, pad_id)


def concat_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """One rollout from several (chunks, or the shares of several ranks or workers), rows in order:
    prompts left-padded and responses right-padded to the widest, every per-row field joined.
    Episodes' fields: ``action_mask`` (a part without one: its response mask, every token sampled),
    ``token_rewards`` (a part without any: zeros; None only when no part has any) and the
    ``episodes`` records; the engine's log-probs and entropies only when every part has them."""
    width_p = max(r.prompt_ids.shape[1] for r in parts)
    width_a = max(r.response_ids.shape[1] for r in parts)

    def pad(t: Tensor, width: int, left: bool, value) -> Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        filler = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
        return torch.cat([filler, t] if left else [t, filler], dim=1)

    def cat(name: str, width: int, left: bool, value, missing: Callable[[Rollout], Tensor] | None = None):
        values = [getattr(r, name) for r in parts]
        if all(v is None for v in values) or (missing is None and any(v is None for v in values)):
            return None
        values = [missing(r) if v is None else v for r, v in zip(parts, values)]
        return torch.cat([pad(v, width, left, value) for v in values])

    return Rollout(
        prompt_ids=cat("prompt_ids", width_p, True, pad_id),
        prompt_mask=cat("prompt_mask", width_p, True, 0),
        response_ids=cat("response_ids", width_a, False, pad_id),
        response_mask=cat("response_mask", width_a, False, 0),
        ended=torch.cat([r.ended for r in parts]),
        prompts=[p for r in parts for p in r.prompts],
        responses=[p for r in parts for p in r.responses],
        sampled_logprobs=cat("sampled_logprobs", width_a, False, 0.0),
        sampled_entropy=cat("sampled_entropy", width_a, False, 0.0),
        action_mask=cat("action_mask", width_a, False, 0, lambda r: r.response_mask),
        token_rewards=cat("token_rewards", width_a, False, 0.0,
                          lambda r: torch.zeros(r.response_mask.shape, device=r.response_mask.device)),
        episodes=None if any(r.episodes is None for r in parts) else [e for r in parts for e in r.episodes],
    )


def no_decode_context(model, rows: int, fp32: tuple = ()):
    """The default decode context: nothing (a CPU engine may pack weights here instead)."""
    return contextlib.nullcontext()
