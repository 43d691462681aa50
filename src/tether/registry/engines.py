"""The generation engines by name (``rollout.engine``, the commands' ``--engine``), each with
what it can do.

An entry names its class as ``"module:Class"`` (imported only when an engine is built: vLLM is a
heavy extra) and declares the engine's capabilities, so config validation, role building, the
loop, the dry run and the commands ask the entry instead of testing the engine's name. This
module imports neither torch nor any engine: the config and the commands' parsers read it.

What an engine does (build itself, sync, check its install, say what memory it adds) is on
its class (:class:`tether.rollout.base.GenerationEngine`); what callers decide on before one is
built is here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.common.errors import ConfigError
from tether.registry.plugins import claim, load_plugins
from tether.common.targets import import_callable


@dataclass(frozen=True)
class EngineSpec:
    """One generation engine: its name, its class and its capabilities (every field is declared,
    none has a default, so an entry cannot leave one out)."""

    name: str
    #: The engine as messages call it ("vLLM").
    title: str
    #: "module:Class" of the engine, imported when one is built.
    target: str
    #: One line for ``rollout.engine``'s help.
    description: str
    #: It samples from a copy of the policy of its own, loaded from the checkpoint on disk and
    #: synced from the actor after every update (``sync_weights``); False: it samples the model
    #: object it is given (nothing to sync, and a frozen policy in memory is enough to measure).
    holds_own_weights: bool
    #: Its rollouts carry the sampled tokens' entropies with their log-probs (else the loop
    #: estimates ``objective/entropy`` from the log-probs).
    returns_entropy: bool
    #: The ``rollout.*`` key that makes the actor take pi_old from the engine's sampling log-probs.
    logprobs_switch: str
    #: The dotted config block of the engine's own settings (inert under any other engine), or None.
    config_block: str | None
    #: After a sync the loop may compare the engine's log-probs with the actor's: the block's
    #: ``check_sync`` turns it on and its ``sync_tolerance`` bounds the difference.
    post_sync_check: bool


#: ``rollout.engine`` name -> its entry (insertion order: the order help and errors list them).
ENGINES: dict[str, EngineSpec] = {}
_BUILT_IN: set[str] = set()  # the names registered below, in this module: no plugin may take one

#: The engine that samples a policy already in memory when the configured one cannot (a frozen
#: policy measured by the demo), and the default of ``rollout.engine`` and ``--engine``.
DEFAULT_ENGINE = "lean"


def register_engine(spec: EngineSpec) -> EngineSpec:
    """Add ``spec`` to :data:`ENGINES`; a built-in engine's name, or another module's, is refused
    (:func:`tether.registry.plugins.claim`)."""
    if ":" not in spec.target:
        raise ConfigError(f"Engine {spec.name!r}: target {spec.target!r} must be 'module:Class'.")
    claim(ENGINES, _BUILT_IN, "Engine", spec)
    ENGINES[spec.name] = spec
    return spec


def engine_names() -> tuple[str, ...]:
    """The registered engine names (plugins' included), in registration order."""
    load_plugins()
    return tuple(ENGINES)


def engine_spec(name: str, key: str = "rollout.engine") -> EngineSpec:
    """The entry of engine ``name``; a ConfigError naming ``key`` and the choices if none."""
    if name not in ENGINES:
        load_plugins()
    try:
        return ENGINES[name]
    except KeyError:
        raise ConfigError(f"{key} = {name!r}: expected one of {list(ENGINES)}.") from None


def engine_class(name: str):
    """The generation-engine class registered as ``name`` (imported now)."""
    return import_callable(engine_spec(name).target, f"the engine {name!r}")


def captured_logprobs(rollout_cfg, name: str | None = None) -> bool:
    """The actor takes pi_old from the sampling pass: the value of the engine's own switch
    (``rollout.capture_logprobs`` or ``rollout.use_engine_logprobs``) in a ``rollout`` block."""
    return bool(getattr(rollout_cfg, engine_spec(name or rollout_cfg.engine).logprobs_switch))


def pi_old_captured(rollout_cfg) -> bool:
    """The actor takes pi_old from the engine's sampling pass and skips its own scoring forward: the
    engine's switch is on and the rollout is sampled by the actor's current weights (a sampling
    worker's log-probs, with ``rollout.max_staleness`` >= 1, are of older weights)."""
    return captured_logprobs(rollout_cfg) and rollout_cfg.max_staleness == 0


def engine_settings_block(cfg, name: str | None = None):
    """The config block of the engine's own settings (e.g. ``cfg.rollout.<block>``), or None."""
    spec = engine_spec(name or cfg.rollout.engine)
    if spec.config_block is None:
        return None
    block = cfg
    for part in spec.config_block.split("."):
        block = getattr(block, part)
    return block


def help_text() -> str:
    """``rollout.engine``'s help: every engine's one-line description."""
    return "; ".join(f"{s.name} = {s.description}" for s in ENGINES.values()) + "."


register_engine(EngineSpec(
    name="lean", title="lean", target="tether.rollout.lean:LeanGenerationEngine",
    description="tether's decode loop over the model with a KV cache (the same tokens as hf for the same seed, "
                "without generate's per-step overhead or the model's generation_config extras)",
    holds_own_weights=False, returns_entropy=True, logprobs_switch="capture_logprobs", config_block=None,
    post_sync_check=False))
register_engine(EngineSpec(
    name="hf", title="HF generate", target="tether.rollout.hf:HFGenerationEngine", description="transformers' generate",
    holds_own_weights=False, returns_entropy=True, logprobs_switch="capture_logprobs", config_block=None,
    post_sync_check=False))

register_engine(EngineSpec(
    name="vllm", title="vLLM", target="tether.rollout.vllm_engine:VLLMGenerationEngine",
    description="a vLLM engine holding its own copy of the policy, synced after every update (rollout.vllm.*)",
    holds_own_weights=True,
    returns_entropy=False,  # vLLM gives the sampled tokens' log-probs only
    logprobs_switch="use_engine_logprobs", config_block="rollout.vllm", post_sync_check=True))
_BUILT_IN.update(ENGINES)
