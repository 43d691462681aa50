"""One builder for every trained model: a loaded model put on its device with that device's
speedups, given its LoRA adapters and gradient checkpointing, and wrapped in a training engine
with its optimiser. The RL actor and critic (:mod:`tether.roles.build`) and the SFT, reward-model
and DPO stages (:mod:`tether.loops`) all build their trained model here, so a change to how a
model is made ready to train is made once.

The order is the one every stage used before it was written once, so a fixed seed gives the
same weights: device preparation first (the device's speedups see the base model's own
``nn.Linear`` modules; the CPU's oneDNN swap changes their class in place), LoRA second (peft
wraps the prepared modules; a checkpoint's adapters are loaded instead of fresh ones), the
engine last (DDP or FSDP wrap the final module; the optimiser sees only the trainable
parameters).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from tether.engines import AdapterOffEngine, EngineSettings, OptimizerSpec, TrainingEngine, prepare_models
from tether.models.lora import trainable


def build_trained(model: torch.nn.Module, spec: OptimizerSpec, settings: EngineSettings, *, lora=None,
                  adapter: str | Path | None = None, checkpointing: bool = False, scalar: bool = False,
                  key: str = "lora", strategy: str | None = None, prepared: bool = False,
                  wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> TrainingEngine:
    """A training engine over ``model``.

    ``lora``: a ``lora:`` config block (adapters when it is enabled; None or disabled: the whole
    model trains); ``adapter``: a checkpoint directory whose adapters are loaded instead of fresh
    ones; ``checkpointing``: gradient checkpointing; ``scalar``: a scalar-head model (its head
    trains beside the adapters); ``key``: the config block named in errors (``critic.lora``).
    ``strategy``: ``distributed.strategy`` (DDP or FSDP under torch.distributed).
    ``prepared``: the caller already put the model on its device with :func:`prepare_models`
    (the RL roles prepare all their trunks at once). ``wrap``: a module around the trained model
    (the actor's value head on its trunk); the engine trains the wrapper.

    The engine's ``model`` is the trained module (the wrapper when ``wrap`` is given); a
    LoRA model stays the peft model, whose base with its adapters off is the reference.
    """
    if not prepared:
        prepare_models([model], settings)
    if lora is not None:
        model = trainable(model, lora, adapter, checkpointing, scalar, key)
    module = wrap(model) if wrap is not None else model
    return TrainingEngine(module, spec, settings.device, settings.precision, settings.on_nonfinite,
                          settings.compile, strategy)


def base_engine(engine: TrainingEngine) -> AdapterOffEngine:
    """The frozen base of a LoRA engine's model, its adapters off, on the same weights: the
    reference of a policy that trains adapters (DPO's; PPO's is made the same way)."""
    return AdapterOffEngine(engine, engine.model)


def resume_adapter(cfg, checkpoint: Path | None, name: str = "model", lora=None) -> Path | None:
    """The adapters to load when resuming: ``checkpoint/name`` under LoRA (a LoRA checkpoint holds
    the adapters alone; its base comes from the config), else None (fresh adapters, or a full
    checkpoint loaded as the model itself). ``lora``: the block that decides (default ``cfg.lora``)."""
    lora = cfg.lora if lora is None else lora
    return checkpoint / name if checkpoint is not None and lora.enabled else None


def resume_source(cfg, checkpoint: Path | None, name: str = "model") -> tuple[str, str | None]:
    """(what to load the trained model from, the config key naming it): ``checkpoint/name`` when
    resuming a full model, else ``model.name_or_path`` (a fresh run, or a LoRA run whose
    checkpoint holds the adapters alone)."""
    if checkpoint is not None and not cfg.lora.enabled:
        return str(checkpoint / name), None
    return cfg.model.name_or_path, "model.name_or_path"
