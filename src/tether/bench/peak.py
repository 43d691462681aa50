"""This machine's matmul peak at a precision and thread count: the denominator of MFU."""

from __future__ import annotations

import time

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


BACKENDS = ("aten", "onednn")


def matmul_peak_gflops(precision: str = "fp32", threads: int | None = None, size: int = 2048,
                       seconds: float = 1.5, backend: str = "aten") -> float:
    """Best GFLOP/s of a plain ``size``³ matmul over ~``seconds`` of repeats (after a warm-up).

    The best rather than the mean: the peak is what the hardware can do, and a neighbour's
    burst only ever slows a repeat down. ``backend``: "aten" = ``torch.mm`` (MKL for fp32 on
    x86, oneDNN for bf16), "onednn" = oneDNN's linear kernel (what ``cpu.linear_backend=onednn``
    runs).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    dtype = DTYPES[precision]
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(size, size, generator=gen).to(dtype)
        b = torch.randn(size, size, generator=gen).to(dtype)
        out = torch.empty(size, size, dtype=dtype)
        if backend == "onednn":
            # (M, K) @ (N, K)ᵀ: the same work as a @ b.
            def product():
                torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
        else:
            def product():
                torch.mm(a, b, out=out)
        for _ in range(2):
            product()
        best = float("inf")
        t_end = time.perf_counter() + seconds
        reps = 0
        while reps < 3 or time.perf_counter() < t_end:
            t0 = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - t0)
            reps += 1
        return 2 * size**3 / best / 1e9
    finally:
        torch.set_num_threads(old)


def bf16_supported() -> bool:
    """bf16 matmuls run natively on this CPU (see :func:`tether.engines.cpu.describe.bf16_native`)."""
    from tether.engines.cpu.describe import bf16_native

    return bf16_native()


def machine_peak_gflops(precision: str = "fp32", threads: int | None = None) -> tuple[float, dict[str, float]]:
    """The machine's matmul peak: the best over the backends this build has, and each one's.

    MFU's denominator is what the hardware can do at this precision and thread count, whichever
    library gets there: on the bench's AMD CPU oneDNN's fp32 kernel beats MKL's by ~20 %.
    """
    from tether.engines.cpu.onednn import onednn_available

    backends = [b for b in BACKENDS if b == "aten" or onednn_available()]
    by_backend = {b: matmul_peak_gflops(precision, threads, backend=b) for b in backends}
    return max(by_backend.values()), by_backend
