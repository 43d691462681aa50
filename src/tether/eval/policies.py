"""Frozen policies to measure outside a training run (`tether eval`, the demo, benchmarks):
each with the generation engine ``rollout.engine`` names and a role for its log-probs, so
evaluation samples with the same engine as training."""

from __future__ import annotations

from dataclasses import dataclass

from tether.engines import InferenceEngine, engine_settings, prepare_models
from tether.engines.settings import EngineSettings
from tether.roles import ModelReward, Reference
from tether.rollout import DEFAULT_ENGINE, EngineSetup, build_engine
from tether.common.runtime import Precision


@dataclass
class MeasuredPolicy:
    """``sampler.generate(...)`` samples it; ``policy.logprobs(rollout, with_entropy)`` scores it."""

    sampler: object
    policy: Reference


def default_settings() -> EngineSettings:
    """This machine's default device (CUDA when available, else CPU), fp32."""
    from tether.common.runtime import resolve_device

    return EngineSettings(device=resolve_device("auto"), precision=Precision("fp32"))


def measured_policy(model, tokenizer, temperature: float, engine: str = DEFAULT_ENGINE,
                    settings: EngineSettings | None = None, path: str | None = None,
                    engine_options: dict | None = None) -> MeasuredPolicy:
    """A frozen causal LM with the generation engine registered as ``engine`` (built through the
    registry, as training builds its own; an engine that holds its own weights loads the
    checkpoint at ``path``, with ``engine_options``: its own settings, e.g. the commands' memory
    flags) on ``settings``'s device, its log-probs at ``temperature`` (the sampling temperature;
    1.0 for greedy). Errors name the commands' flags."""
    from tether.models import context_length

    settings = settings or default_settings()
    prepared = prepare_models([model], settings)
    frozen = InferenceEngine(model, settings.device, settings.precision)
    setup = EngineSetup(tokenizer, model=model, path=None if path is None else str(path), context=context_length(model),
                        autocast=settings.precision.autocast, decode_context=prepared.decode_context, capture=False,
                        options=dict(engine_options or {}), named_by="flags")
    sampler = build_engine(engine, setup, "--engine")
    return MeasuredPolicy(sampler, Reference(frozen, temperature))


def measured_reward(model, settings: EngineSettings | None = None, name: str = "reward model") -> ModelReward:
    """A frozen reward model on ``settings``'s device."""
    settings = settings or default_settings()
    prepare_models([model], settings)
    return ModelReward(InferenceEngine(model, settings.device, settings.precision), name)


__all__ = ["MeasuredPolicy", "default_settings", "engine_settings", "measured_policy", "measured_reward"]
