"""Which CPU this is: for the linear backend's default and for every benchmark report.

The fastest fp32 matmul library depends on the CPU: oneDNN beat MKL by 5-30 % at the PPO
shapes on an AMD EPYC Zen 4, MKL matched or beat oneDNN on an Intel Xeon with AMX
(docs/performance.md, "cpu.linear_backend"). ``cpu.linear_backend=auto`` picks by :func:`cpu_vendor`.
Bench results, likewise, only compare within one machine type, so every report names the CPU
model and the matmul features that decide which kernels run (AMX and AVX512-BF16 for bf16,
AVX-512 for fp32), read from ``/proc/cpuinfo`` on Linux.
"""

from __future__ import annotations

import os
import platform
from functools import lru_cache
from pathlib import Path

import torch

#: CPU flags that change which matmul kernels oneDNN and MKL pick (Linux ``/proc/cpuinfo`` names).
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")


def parse_cpuinfo(text: str) -> dict:
    """The first processor's vendor, model name, family/model/stepping numbers and matmul flags
    from ``/proc/cpuinfo`` text (a hypervisor may report a generic name such as
    ``Intel(R) Xeon(R) Processor``; the numbers still tell generations apart).

    Missing fields are None (flags: an empty list); ``flags`` keeps :data:`MATMUL_FLAGS` order.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    numbers = "/".join(fields.get(k, "?") for k in ("cpu family", "model", "stepping"))
    return {"vendor": fields.get("vendor_id"), "model": fields.get("model name"),
            "family_model_stepping": None if numbers == "?/?/?" else numbers,
            "flags": [f for f in MATMUL_FLAGS if f in flags]}


def cpu_description(cpuinfo: str | Path = "/proc/cpuinfo") -> dict:
    """This machine's CPU for a report: ``model``, ``vendor``, matmul ``flags``, ``logical_cpus``
    and torch's ``capability`` (``AVX512``, ``AVX2``, ...). Off Linux, ``model`` falls back to
    :func:`platform.processor` and ``flags`` is empty."""
    try:
        info = parse_cpuinfo(Path(cpuinfo).read_text())
    except OSError:
        info = {"vendor": None, "model": platform.processor() or None, "family_model_stepping": None, "flags": []}
    return info | {"logical_cpus": os.cpu_count(), "capability": torch.backends.cpu.get_cpu_capability()}


def describe(cpu: dict) -> str:
    """One line for a table's header: ``Intel(R) Xeon(R) Processor (6/167/1), 2 logical CPUs, avx2 ...``."""
    name = cpu.get("model") or "unknown CPU"
    if cpu.get("family_model_stepping"):
        name += f" ({cpu['family_model_stepping']})"
    parts = [name, f"{cpu.get('logical_cpus')} logical CPUs"]
    if cpu.get("flags"):
        parts.append(" ".join(cpu["flags"]))
    return ", ".join(parts)


@lru_cache(maxsize=1)
def cpu_vendor() -> str | None:
    """``GenuineIntel``, ``AuthenticAMD``, ... from ``/proc/cpuinfo``; None where it cannot be read."""
    return cpu_description()["vendor"]


def bf16_native() -> bool:
    """bf16 matmuls run natively here (AVX512-BF16 or AMX), checked with a tiny bf16 matmul too.

    Without native support CPU autocast still works but emulates bf16 and runs slower than fp32.
    """
    if not torch.backends.mkldnn.is_available():
        return False
    native = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        if native is not None and not native():
            return False
        a = torch.ones(4, 4, dtype=torch.bfloat16)
        return bool((a @ a).eq(4).all())
    except RuntimeError:
        return False
