"""Where the update's time goes: matmul kernels versus everything else.

The MFU of the update is the product of two factors: how fast the matmul kernels themselves
run at the model's shapes, and which fraction of the update they occupy. While
:func:`profiled_update` is active, every aten operator of the trainer's update is timed in
the thread that runs it — the calling thread, or the actor's and the critic's threads under
``cpu.parallel_roles`` (``torch.profiler`` records only the thread that started it) — and
:func:`summarize_ops` reports both factors plus the operators with the most time, so the gap
to a target can be read off directly.

The clock is a ``TorchDispatchMode``: it sees the operators after autograd and autocast (so
the backward's and bf16 matmuls are counted), and each operator once (its self time). It adds
a few microseconds of Python per operator to the profiled iteration, which is why the shares
are taken against the update time of the ordinary, unprofiled iterations.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tether.engines.cpu.onednn import linear_flops

MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::_mkldnn_matmul",
              "aten::mkldnn_linear", "mkldnn::_linear_pointwise")


def matmul_flops(name: str, shapes: list[tuple[int, ...]]) -> int:
    """FLOPs a matmul operator executed, from its tensor arguments' shapes (in call order).

    ``aten::mm`` (M, K) @ (K, N) and ``aten::addmm`` (bias, (M, K), (K, N)): 2·M·K·N;
    ``aten::bmm`` / ``aten::baddbmm``: 2·B·M·K·N; ``mkldnn::_linear_pointwise`` (oneDNN linear,
    ``cpu.linear_backend=onednn``) (..., K) input and (N, K) weight: 2·M·K·N. Other operators: 0.
    """
    if name == "mkldnn::_linear_pointwise" and len(shapes) >= 2:
        return linear_flops(shapes[0], shapes[1])
    if name in ("aten::addmm", "aten::baddbmm"):
        shapes = shapes[1:]
    if name in ("aten::mm", "aten::addmm") and len(shapes) >= 2 and len(shapes[0]) == 2:
        (m, k), n = shapes[0], shapes[1][-1]
        return 2 * m * k * n
    if name in ("aten::bmm", "aten::baddbmm") and len(shapes) >= 2 and len(shapes[0]) == 3:
        (b, m, k), n = shapes[0], shapes[1][-1]
        return 2 * b * m * k * n
    return 0


def summarize_ops(ops: dict[str, float], update_s: float, update_gflop: float, top: int = 12,
                  streams: int = 1, executed_gflop: float | None = None) -> dict:
    """``ops``: operator name -> self seconds within the update. Pure arithmetic.

    Returns the matmul seconds, their GFLOP/s, the seconds not in matmuls, the matmul share of
    the update and the ``top`` operators by self time. The GFLOP/s are of ``executed_gflop``
    (the matmuls' own FLOPs, as the clock counted them) when given, else of ``update_gflop``
    (the update's counted work, which skipped work such as ``rl.trim_last_layer`` inflates).
    ``streams``: threads that ran the update side by side (``cpu.parallel_roles``), each on its
    share of the cores. Self times are then summed over the threads: the matmul seconds are
    divided by ``streams`` to compare with the wall-clock update, and the share is of
    ``update_s × streams`` thread-seconds.
    """
    matmul_s = sum(s for name, s in ops.items() if name in MATMUL_OPS) / streams
    ranked = sorted(ops.items(), key=lambda kv: kv[1], reverse=True)[:top]
    work = update_gflop if executed_gflop is None else executed_gflop
    return {
        "update_s": update_s,
        "streams": streams,
        "matmul_s": matmul_s,
        "matmul_gflops": work / matmul_s if matmul_s > 0 else float("nan"),
        "executed_matmul_gflop": executed_gflop,
        "counted_update_gflop": update_gflop,
        "non_matmul_s": max(update_s - matmul_s, 0.0),
        "matmul_share": matmul_s / update_s if update_s > 0 else float("nan"),
        "top_ops_s": {name: round(s, 4) for name, s in ranked},
    }


class OpClock(TorchDispatchMode):
    """Seconds per aten operator (``aten::mm``, ...) summed into ``totals``; shareable across threads."""

    def __init__(self, totals: dict[str, float], lock: threading.Lock, flops: dict[str, int] | None = None):
        super().__init__()
        self.totals, self.lock = totals, lock
        self.flops = flops if flops is not None else {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        elapsed = time.perf_counter() - t0
        name = f"{func.namespace}::{func.overloadpacket.__name__}"
        flops = 0
        if name in MATMUL_OPS:
            flops = matmul_flops(name, [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
        with self.lock:
            self.totals[name] = self.totals.get(name, 0.0) + elapsed
            if flops:
                self.flops[name] = self.flops.get(name, 0) + flops
        return out


@contextmanager
def profiled_update(trainer, sink: dict):
    """While active, ``trainer.update`` runs with every operator timed; seconds per operator
    (summed over the role threads) land in ``sink["ops"]``, the update's wall time in
    ``sink["update_s"]``, the number of threads that ran it side by side in ``sink["streams"]``
    and the matmuls' executed GFLOP in ``sink["matmul_gflop"]``."""
    threads = trainer.placement.threads
    original, wrap = trainer.update, threads.wrap
    totals: dict[str, float] = {}
    flops: dict[str, int] = {}
    lock = threading.Lock()

    def clocked(job):
        def run():
            with OpClock(totals, lock, flops):
                return job()

        return run

    def update(exp):
        threads.wrap = clocked
        try:
            t0 = time.perf_counter()
            with OpClock(totals, lock, flops):  # the calling thread's share (all of it without role threads)
                out = original(exp)
            sink["update_s"] = time.perf_counter() - t0
        finally:
            threads.wrap = wrap
        sink["ops"] = dict(totals)
        sink["matmul_gflop"] = sum(flops.values()) / 1e9
        sink["streams"] = trainer.update_streams()
        return out

    trainer.update = update
    try:
        yield
    finally:
        trainer.update = original
