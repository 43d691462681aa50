"""Generation engines behind one protocol (:class:`GenerationEngine`), chosen by name
(``rollout.engine``) from the registry (:mod:`tether.registry.engines`) and built through it
(:func:`make_engine`, :func:`build_engine`). Importing this package imports no torch: the
engines' modules load when used (vLLM is a heavy extra)."""

from __future__ import annotations

import importlib

from tether.registry.engines import (
    DEFAULT_ENGINE,
    ENGINES,
    EngineSpec,
    captured_logprobs,
    engine_class,
    engine_names,
    engine_settings_block,
    engine_spec,
    register_engine,
)
from tether.rollout.setup import EngineSetup, build_engine, check_frozen, install_check, make_engine, run_setup

#: Names imported from the engines' modules when first used (they import torch).
_LAZY = {"GenerationEngine": "tether.rollout.base", "SamplingParams": "tether.rollout.base",
         "HFGenerationEngine": "tether.rollout.hf", "truncate_after_eos": "tether.rollout.base",
         "LeanGenerationEngine": "tether.rollout.lean"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tether.rollout' has no attribute {name!r}")


__all__ = ["DEFAULT_ENGINE", "ENGINES", "EngineSetup", "EngineSpec", "GenerationEngine", "HFGenerationEngine",
           "LeanGenerationEngine", "SamplingParams", "build_engine", "captured_logprobs", "check_frozen", "engine_class",
           "engine_names", "engine_settings_block", "engine_spec", "install_check", "make_engine", "register_engine", "run_setup",
           "truncate_after_eos"]
