"""CPU-only speedups, in one place the loops never import (docs/performance.md has what each buys).

:func:`prepare` is called by the engine settings (:func:`tether.engines.prepare_models`) for
models that run on a CPU; it returns the decode context the generation engines enter around
their decode loop. Everything here changes speed, never the maths beyond float summation order:
``tests/integration/test_ppo_equivalence.py`` runs each on and off.

- ``cpu.linear_backend``: fp32 linear layers through oneDNN (:mod:`.onednn`), with the decode
  loop's weights packed once per rollout;
- fp32 attention under bf16 autocast (:mod:`.attention`): bf16 SDPA is slower on CPU;
- ``cpu.retain_memory``: glibc keeps freed memory mapped (:mod:`.memory`);
- ``cpu.parallel_roles`` is the local placement's business (:mod:`tether.placement.local`).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def configure_process(cpu_cfg) -> bool:
    """Process-wide settings (once is enough): ``cpu.retain_memory``. Returns whether memory is retained."""
    from tether.engines.cpu.memory import retain_freed_memory

    return bool(getattr(cpu_cfg, "retain_memory", False)) and retain_freed_memory()


def prepare(models: list, cpu_cfg, precision, compile=False):
    """Apply the CPU speedups to ``models`` (all on the CPU); returns the decode context for the
    generation engines (None: nothing to enter) and the linear backend in use."""
    from tether.engines.cpu.attention import use_fp32_attention
    from tether.engines.cpu.describe import bf16_native
    from tether.engines.cpu.onednn import packed_linears, resolve_backend, use_onednn_linears

    configure_process(cpu_cfg)
    if precision.autocast == "bf16":
        if not bf16_native():
            log.warning("run.precision=bf16 on a CPU without native bf16 (AVX512-BF16/AMX): it will be emulated "
                        "and run slower than fp32.")
        for model in models:
            use_fp32_attention(model)
    choice = getattr(cpu_cfg, "linear_backend", "aten")
    backend = resolve_backend(choice, precision.autocast)
    if choice == "auto":
        log.info("cpu.linear_backend=auto: %s on this CPU.", backend)
    if backend == "onednn" and compile:
        log.info("rl.compile is on: linear layers stay on aten (cpu.linear_backend=onednn ignored).")
        backend = "aten"
    if backend == "onednn":
        for model in models:
            use_onednn_linears(model)
        return packed_linears, backend
    return None, backend
