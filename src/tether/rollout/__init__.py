"""Generation engines behind one Protocol. vLLM will join as a lazily imported extra."""

from tether.rollout.base import GenerationEngine, SamplingParams
from tether.rollout.hf import HFGenerationEngine, truncate_after_eos
from tether.rollout.lean import LeanGenerationEngine

__all__ = ["GenerationEngine", "HFGenerationEngine", "LeanGenerationEngine", "SamplingParams", "truncate_after_eos"]
