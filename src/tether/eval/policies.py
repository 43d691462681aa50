"""Frozen policies to measure outside a training run (`tether eval`, the demo, benchmarks):
each with the generation engine ``rollout.engine`` names and a role for its log-probs, so
evaluation samples with the same engine as training."""

from __future__ import annotations

from dataclasses import dataclass

from tether.engines import InferenceEngine, engine_settings, prepare_models
from tether.engines.settings import EngineSettings
from tether.roles import ModelReward, Reference
from tether.rollout import engine_class
from tether.runtime import Precision


@dataclass
class MeasuredPolicy:
    """``sampler.generate(...)`` samples it; ``policy.logprobs(rollout, with_entropy)`` scores it."""

    sampler: object
    policy: Reference


def default_settings() -> EngineSettings:
    """This machine's default device (CUDA when available, else CPU), fp32."""
    from tether.runtime import resolve_device

    return EngineSettings(device=resolve_device("auto"), precision=Precision("fp32"))


def measured_policy(model, tokenizer, temperature: float, engine: str = "lean",
                    settings: EngineSettings | None = None, path: str | None = None,
                    vllm_options=None) -> MeasuredPolicy:
    """A frozen causal LM with the generation engine ``engine`` ("lean", "hf", or "vllm", which
    loads the checkpoint at ``path`` itself, with ``vllm_options``: a
    :class:`~tether.rollout.vllm_engine.VLLMOptions`) on ``settings``'s device, its log-probs at
    ``temperature`` (the sampling temperature; 1.0 for greedy)."""
    settings = settings or default_settings()
    prepared = prepare_models([model], settings)
    frozen = InferenceEngine(model, settings.device, settings.precision)
    if engine == "vllm":
        from tether.models import context_length
        from tether.rollout.vllm_engine import CLI_KEYS, VLLMGenerationEngine, VLLMOptions

        if path is None:
            raise ValueError("engine 'vllm' samples from a checkpoint on disk: pass its path")
        sampler = VLLMGenerationEngine(path, tokenizer, vllm_options or VLLMOptions(), context=context_length(model),
                                       keys=CLI_KEYS)
    else:
        sampler = engine_class(engine)(model, tokenizer, autocast=settings.precision.autocast, capture=False,
                                       decode_context=prepared.decode_context)
    return MeasuredPolicy(sampler, Reference(frozen, temperature))


def measured_reward(model, settings: EngineSettings | None = None, name: str = "reward model") -> ModelReward:
    """A frozen reward model on ``settings``'s device."""
    settings = settings or default_settings()
    prepare_models([model], settings)
    return ModelReward(InferenceEngine(model, settings.device, settings.precision), name)


__all__ = ["MeasuredPolicy", "default_settings", "engine_settings", "measured_policy", "measured_reward"]
