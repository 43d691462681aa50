"""Where and how a stage's engines run, from its config: device, precision, compile, the
non-finite policy and the device's own speedups (the CPU's, applied by :func:`prepare_models`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.distributed.process import local_rank
from tether.runtime import Precision, resolve_device, world_size


@dataclass(frozen=True)
class EngineSettings:
    device: torch.device
    precision: Precision
    on_nonfinite: str = "stop"
    compile: bool | str = False
    cpu: object | None = None  # the stage's cpu: block (used only when the device is a CPU)


def engine_settings(cfg, compile: bool | str = False) -> EngineSettings:
    """The settings of a stage config (``run.device``, ``run.precision``, ``run.on_nonfinite``,
    ``cpu``); ``run.device`` naming a device this machine lacks is a ConfigError here."""
    device = resolve_device(cfg.run.device)
    if device.type == "cuda" and device.index in (None, 0) and cfg.run.device in ("auto", "cuda") and world_size() > 1:
        device = torch.device("cuda", local_rank())  # torchrun: one GPU per local rank
    return EngineSettings(device=device, precision=Precision(cfg.run.precision),
                          on_nonfinite=cfg.run.on_nonfinite, compile=compile, cpu=getattr(cfg, "cpu", None))


@dataclass(frozen=True)
class Prepared:
    """What preparing models for their device gave: the generation engines' decode context
    (``None``: nothing to enter) and the linear backend in use ("aten" off the CPU)."""

    decode_context: object = None
    linear_backend: str = "aten"


def prepare_models(models: list, settings: EngineSettings) -> Prepared:
    """Put ``models`` on the device and apply that device's speedups (on CPU: oneDNN linears,
    fp32 attention under bf16, retained memory; :mod:`tether.engines.cpu`)."""
    for model in models:
        model.to(settings.device)
    if settings.device.type != "cpu" or settings.cpu is None:
        return Prepared()
    from tether.engines import cpu

    context, backend = cpu.prepare(models, settings.cpu, settings.precision, settings.compile)
    return Prepared(context, backend)
