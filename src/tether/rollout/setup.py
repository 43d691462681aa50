"""Building a generation engine: :class:`EngineSetup`, what any engine is built from, and the two
ways one is made: a run's engine over its actor (:func:`make_engine`, from the config) and a
frozen policy's (:func:`build_engine`: `tether eval`, `serve`, `pairs`, best-of-N, the demo).
Both go through the registry and the engine's own ``from_config``; no caller names an engine.
Imports no torch (the engine's module is imported when it is built)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.registry.engines import captured_logprobs, engine_class, engine_settings_block, engine_spec


@dataclass(frozen=True)
class EngineSetup:
    """Everything an engine may be built from; each engine reads what it needs.

    An engine that samples the model it is given reads ``model``, ``autocast`` and
    ``decode_context``; one that holds its own weights reads ``path`` (its initial weights),
    ``context``, ``options`` and ``weights_source`` (what it syncs from).
    """

    tokenizer: Any
    #: The policy in this process (a causal LM, unwrapped of any training wrapper), or None.
    model: Any = None
    #: The policy's checkpoint on disk (where an engine with its own weights loads them from).
    path: str | None = None
    #: Positions the policy holds (its context length), when known.
    context: int | None = None
    #: "none", "bf16" or "fp16": the precision the engine samples in.
    autocast: str = "none"
    #: ``decode_context(model, rows, fp32=(modules,))``: entered around a decode loop (CPU packing).
    decode_context: Callable | None = None
    #: Return the sampled tokens' log-probs (and entropies, where the engine has them).
    capture: bool = False
    #: () -> (name, tensor) pairs of the actor's current weights (its ``sync_weights``); None for a
    #: frozen policy.
    weights_source: Callable[[], Iterable] | None = None
    #: The engine's own settings (the keys of its config block, e.g. ``rollout.vllm.*``); an
    #: engine ignores keys it does not have.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: The run's seed (an engine with its own generator seeds it with this).
    seed: int = 0
    #: How the engine's errors name its settings: "config" (training keys) or "flags" (commands).
    named_by: str = "config"


def run_setup(cfg, tokenizer, actor_model=None, actor=None, context: int | None = None, settings=None,
              prepared=None, path: str | None = None) -> EngineSetup:
    """The setup of a run's engine (``rollout.engine``) over the actor: its model in this process
    (``actor_model``), its role (``actor``, whose ``sync_weights`` an engine with its own copy
    pulls from), its context, the engine settings (``settings``: precision) and the device
    preparation (``prepared``: the decode context). ``path``: the policy's checkpoint on disk
    (default ``model.name_or_path``)."""
    block = engine_settings_block(cfg)
    return EngineSetup(
        tokenizer=tokenizer, model=actor_model, path=path or cfg.model.name_or_path, context=context,
        autocast=settings.precision.autocast if settings is not None else "none",
        decode_context=getattr(prepared, "decode_context", None),
        # The engine returns its sampling log-probs when pi_old comes from them, for the off-policy
        # correction, or for the token check of episodes (rollout/token_mismatch).
        capture=(captured_logprobs(cfg.rollout) or getattr(cfg.rollout, "is_correction", "none") != "none"
                 or getattr(getattr(cfg, "environment", None), "enabled", False)),
        weights_source=getattr(actor, "sync_weights", None),
        options=dataclasses.asdict(block) if block is not None else {}, seed=cfg.run.seed)


def build_engine(name: str, setup: EngineSetup, key: str = "rollout.engine"):
    """The engine registered as ``name``, built from ``setup`` (its class's ``from_config``)."""
    spec = engine_spec(name, key)
    if spec.holds_own_weights and setup.path is None:
        raise ValueError(f"engine {name!r} loads its own copy of the policy from a checkpoint on disk: pass its path")
    return engine_class(name).from_config(setup)


def make_engine(cfg, tokenizer, actor_model, actor, context: int | None = None, settings=None, prepared=None):
    """The run's generation engine (``rollout.engine``) over the actor (see :func:`run_setup`)."""
    return build_engine(cfg.rollout.engine, run_setup(cfg, tokenizer, actor_model, actor, context, settings, prepared))


def install_check(name: str, setup: EngineSetup, model_config=None, key: str = "rollout.engine") -> str | None:
    """What would stop engine ``name`` on ``setup`` (its install, its settings against the model
    at ``setup.path``), checked before any weights load: a ConfigError, else a line saying what
    was checked (None when there is nothing to check). ``model_config``: the model's config, if read."""
    engine_spec(name, key)
    return engine_class(name).install_check(setup, model_config)


def check_frozen(name: str, paths, options: Mapping[str, Any] | None = None, seed: int = 0) -> None:
    """:func:`install_check` of engine ``name`` for each frozen policy at ``paths`` (None skipped,
    each once), its settings named by the commands' flags: what `tether eval`, `serve` and
    `pairs` run before any weights load."""
    for path in dict.fromkeys(str(p) for p in paths if p):
        install_check(name, EngineSetup(None, path=path, options=dict(options or {}), seed=seed, named_by="flags"),
                      key="--engine")
