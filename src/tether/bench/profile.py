"""Where the update's time goes: matmul kernels versus everything else, from ``torch.profiler``.

The MFU of the update is the product of two factors: how fast the matmul kernels themselves
run at the model's shapes, and which fraction of the update they occupy. While
:func:`profiled_update` is active the trainer's update runs under the profiler, and
:func:`summarize_ops` reports both factors plus the operators with the most self time, so the
gap to a target can be read off directly.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

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


@contextmanager
def profiled_update(trainer, sink: dict):
    """While active, ``trainer.update`` runs under ``torch.profiler``; self times land in ``sink``."""
    from torch.profiler import ProfilerActivity, profile

    original = trainer.update

    def update(exp):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            out = original(exp)
            sink["update_s"] = time.perf_counter() - t0
        sink["ops"] = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
        return out

    trainer.update = update
    try:
        yield
    finally:
        trainer.update = original
