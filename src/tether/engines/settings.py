"""Where and how a stage's engines run, from its config: device, precision, compile, the
non-finite policy and the device's own speedups (the CPU's, applied by :func:`prepare_models`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.distributed.process import local_rank
from tether.common.runtime import Precision, resolve_device, world_size


@dataclass(frozen=True)
class EngineSettings:
    device: torch.device
    precision: Precision
    on_nonfinite: str = "stop"
    compile: bool | str = False
    cpu: object | None = None  # the stage's cpu: block (used only when the device is a CPU)
    padding_free: bool = True  # model.padding_free: passes pack rows where the model supports it


def engine_settings(run, model, cpu=None, compile: bool | str = False) -> EngineSettings:
    """The settings built from the blocks they read: ``run`` (``device``, ``precision``,
    ``on_nonfinite``), ``model`` (``attn_implementation``, ``dtype``, ``padding_free``) and the
    stage's ``cpu`` block (None: a stage without one). ``run.device`` naming a device this machine
    lacks, or a ``model.attn_implementation`` that cannot run on it (a package missing,
    flash-attention off CUDA or in fp32, flex_attention on a CPU, which has no backward there: every
    stage built on these settings trains a model), is a ConfigError here, before any input is read
    or weight loaded."""
    from tether.models.attn_implementation import check_attention

    device = resolve_device(run.device)
    if device.type == "cuda" and device.index in (None, 0) and run.device in ("auto", "cuda") and world_size() > 1:
        device = torch.device("cuda", local_rank())  # torchrun: one GPU per local rank
    check_attention(model.attn_implementation, device, model.dtype, run.precision)
    return EngineSettings(device=device, precision=Precision(run.precision), on_nonfinite=run.on_nonfinite,
                          compile=compile, cpu=cpu, padding_free=model.padding_free)


@dataclass(frozen=True)
class Prepared:
    """What preparing models for their device gave: the generation engines' decode context
    (``None``: nothing to enter) and the linear backend in use ("aten" off the CPU)."""

    decode_context: object = None
    linear_backend: str = "aten"


def prepare_models(models: list, settings: EngineSettings) -> Prepared:
    """Put ``models`` on the device, set whether their passes pack rows (``model.padding_free``:
    :func:`tether.models.packing.set_padding_free`), and apply that device's speedups (on CPU:
    oneDNN linears, fp32 attention under bf16, retained memory; :mod:`tether.engines.cpu`)."""
    from tether.models.packing import set_padding_free

    for model in models:
        model.to(settings.device)
        set_padding_free(model, settings.padding_free)
    if settings.device.type != "cpu" or settings.cpu is None:
        return Prepared()
    from tether.engines import cpu

    context, backend = cpu.prepare(models, settings.cpu, settings.precision, settings.compile)
    return Prepared(context, backend)
