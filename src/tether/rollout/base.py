"""The generation-engine interface: token ids in, a :class:`~tether.types.Rollout` out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

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


class GenerationEngine(Protocol):
    """Anything that turns prompt ids into responses: HF ``generate`` today, vLLM later."""

    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams) -> Rollout:
        """Sample one response per prompt. ``prompts`` is the text, carried for judges and logs."""

    def sync_weights(self, model) -> None:
        """Load the actor's current weights (a no-op when the engine shares the model)."""
