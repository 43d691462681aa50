"""Generation engines behind one protocol (:class:`GenerationEngine`), chosen by name
(``rollout.engine``) from :data:`ENGINES` and imported only when used (vLLM is a heavy extra)."""

from __future__ import annotations

import importlib

from tether.rollout.base import GenerationEngine, SamplingParams
from tether.rollout.hf import HFGenerationEngine, truncate_after_eos
from tether.rollout.lean import LeanGenerationEngine

#: ``rollout.engine`` name -> "module:class".
ENGINES = {
    "lean": "tether.rollout.lean:LeanGenerationEngine",
    "hf": "tether.rollout.hf:HFGenerationEngine",
    "vllm": "tether.rollout.vllm_engine:VLLMGenerationEngine",  # its own copy of the weights: see make_roles
}


def engine_class(name: str):
    """The generation-engine class registered as ``name``."""
    module, attr = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), attr)


__all__ = ["ENGINES", "GenerationEngine", "HFGenerationEngine", "LeanGenerationEngine", "SamplingParams",
           "engine_class", "truncate_after_eos"]
