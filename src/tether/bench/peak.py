"""This machine's matmul peak at a precision and thread count: the denominator of MFU."""

from __future__ import annotations

import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def matmul_peak_gflops(precision: str = "fp32", threads: int | None = None, size: int = 2048,
                       seconds: float = 1.5) -> float:
    """Best GFLOP/s of a plain ``size``³ matmul over ~``seconds`` of repeats (after a warm-up).

    The best rather than the mean: the peak is what the hardware can do, and a neighbour's
    burst only ever slows a repeat down.
    """
    dtype = DTYPES[precision]
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=gen).to(dtype)
        b = torch.randn(size, size, generator=gen).to(dtype)
        out = torch.empty(size, size, dtype=dtype)
        for _ in range(2):
            torch.mm(a, b, out=out)
        best = float("inf")
        t_end = time.perf_counter() + seconds
        reps = 0
        while reps < 3 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - t0)
            reps += 1
        return 2 * size**3 / best / 1e9
    finally:
        torch.set_num_threads(old)


def bf16_supported() -> bool:
    """bf16 matmuls run natively on this CPU (see :func:`tether.models.forward.bf16_native`)."""
    from tether.models.forward import bf16_native

    return bf16_native()
