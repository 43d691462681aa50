"""Where the update's time goes: matmul kernels versus everything else.

The MFU of the update is the product of two factors: how fast the matmul kernels themselves
run at the model's shapes, and which fraction of the update they occupy. While
:func:`profiled_update` is active, every aten operator of the trainer's update is timed in
the thread that runs it — the calling thread, or the actor's and the critic's threads under
``ppo.parallel_roles`` (``torch.profiler`` records only the thread that started it) — and
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

from torch.utils._python_dispatch import TorchDispatchMode

MATMUL_OPS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::_mkldnn_matmul",
              "aten::mkldnn_linear")


def summarize_ops(ops: dict[str, float], update_s: float, update_gflop: float, top: int = 12,
                  streams: int = 1) -> dict:
    """``ops``: operator name -> self seconds within the update. Pure arithmetic.

    Returns the matmul seconds, their GFLOP/s on the update's counted work, the seconds not in
    matmuls, the matmul share of the update and the ``top`` operators by self time.
    ``streams``: threads that ran the update side by side (``ppo.parallel_roles``), each on its
    share of the cores. Self times are then summed over the threads: the matmul seconds are
    divided by ``streams`` to compare with the wall-clock update, and the share is of
    ``update_s × streams`` thread-seconds.
    """
    matmul_s = sum(s for name, s in ops.items() if name in MATMUL_OPS) / streams
    ranked = sorted(ops.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return {
        "update_s": update_s,
        "streams": streams,
        "matmul_s": matmul_s,
        "matmul_gflops": update_gflop / matmul_s if matmul_s > 0 else float("nan"),
        "non_matmul_s": max(update_s - matmul_s, 0.0),
        "matmul_share": matmul_s / update_s if update_s > 0 else float("nan"),
        "top_ops_s": {name: round(s, 4) for name, s in ranked},
    }


class OpClock(TorchDispatchMode):
    """Seconds per aten operator (``aten::mm``, ...) summed into ``totals``; shareable across threads."""

    def __init__(self, totals: dict[str, float], lock: threading.Lock):
        super().__init__()
        self.totals, self.lock = totals, lock

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        elapsed = time.perf_counter() - t0
        name = f"aten::{func.overloadpacket.__name__}"
        with self.lock:
            self.totals[name] = self.totals.get(name, 0.0) + elapsed
        return out


@contextmanager
def profiled_update(trainer, sink: dict):
    """While active, ``trainer.update`` runs with every operator timed; seconds per operator
    (summed over the role threads) land in ``sink["ops"]``, the update's wall time in
    ``sink["update_s"]`` and the number of threads that ran it side by side in ``sink["streams"]``."""
    original, wrap = trainer.update, trainer.threads.wrap
    totals: dict[str, float] = {}
    lock = threading.Lock()

    def clocked(job):
        def run():
            with OpClock(totals, lock):
                return job()

        return run

    def update(exp):
        trainer.threads.wrap = clocked
        try:
            t0 = time.perf_counter()
            with OpClock(totals, lock):  # the calling thread's share (all of it without role threads)
                out = original(exp)
            sink["update_s"] = time.perf_counter() - t0
        finally:
            trainer.threads.wrap = wrap
        sink["ops"] = dict(totals)
        sink["streams"] = 2 if trainer.threads.parallel() else 1
        return out

    trainer.update = update
    try:
        yield
    finally:
        trainer.update = original
