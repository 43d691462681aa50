"""The generation-engine interface: token ids in, a :class:`~tether.types.Rollout` out.

Every place that samples from a policy (PPO's rollouts, held-out evaluation, best-of-N, the
sweep, `tether eval`, `tether serve`) goes through this protocol, so the engine chosen by
``rollout.engine`` is the one that samples everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from tether.types import Rollout


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
    """Anything that turns prompt ids into responses: the lean loop, HF ``generate``, vLLM."""

    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step: StepHook | None = None) -> Rollout:
        """Sample one response per prompt. ``prompts`` is the text, carried for judges and logs.

        ``seed``: sample under a private RNG stream seeded with it (the same call, the same
        responses, and the caller's RNG untouched). ``chunk_size``: at most that many prompts per
        forward batch, one after the other in the same stream.
        """

    def shares_weights(self) -> bool:
        """True when the engine samples from the actor's own model object (nothing to sync)."""

    def load_weights(self, named_weights: Iterable[tuple[str, Tensor]]) -> None:
        """Load the actor's current weights into an engine that holds its own copy."""


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
    """One rollout from several: prompts left-padded and responses right-padded to the widest."""
    width_p = max(r.prompt_ids.shape[1] for r in parts)
    width_a = max(r.response_ids.shape[1] for r in parts)

    def pad(t: Tensor, width: int, left: bool, value) -> Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        filler = torch.full((t.shape[0], extra), value, dtype=t.dtype, device=t.device)
        return torch.cat([filler, t] if left else [t, filler], dim=1)

    def cat(name: str, width: int, left: bool, value):
        values = [getattr(r, name) for r in parts]
        if any(v is None for v in values):
            return None
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
    )


def no_decode_context(model, rows: int, fp32: tuple = ()):
    """The default decode context: nothing (a CPU engine may pack weights here instead)."""
    return contextlib.nullcontext()
