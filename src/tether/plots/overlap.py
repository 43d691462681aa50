"""How much sampling an asynchronous run hid behind training (``rollout.max_staleness`` >= 1),
from its logged metrics: what the report's "Asynchronous rollouts" section shows."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

#: The keys an asynchronous iteration logs (tether.loops.rl.RLTrainer.sample).
GENERATE, TRAINER_WAIT, ENGINE_WAIT = "timing/engine_generate", "timing/rollout_wait", "timing/engine_wait"
STALENESS_MEAN, STALENESS_MAX = "rollout/staleness_mean", "rollout/staleness_max"


def overlap_summary(rows: Sequence[dict]) -> dict | None:
    """Over the iterations of an asynchronous run (None when there are none): the seconds the worker
    sampled, the trainer waited for a rollout and the worker waited for weights or work (sums and
    medians per iteration), the staleness's mean and max, and ``overlap``, the fraction of sampling
    time the trainer did not wait for (1 - waited / sampled, floored at 0). The overlap leaves out
    the first iteration, whose rollout nothing could sample ahead (the trainer waits for the
    worker to start as well)."""
    rows = [r for r in rows if isinstance(r.get(GENERATE), (int, float)) and isinstance(r.get(TRAINER_WAIT), (int, float))]
    if not rows:
        return None
    ahead = rows[1:] or rows
    sampled = sum(r[GENERATE] for r in ahead)
    waited = sum(r[TRAINER_WAIT] for r in ahead)
    return {
        "iterations": len(rows),
        "sampling_s": sum(r[GENERATE] for r in rows),
        "trainer_wait_s": sum(r[TRAINER_WAIT] for r in rows),
        "engine_wait_s": sum(r.get(ENGINE_WAIT, 0.0) for r in rows),
        "sampling_s_median": statistics.median(r[GENERATE] for r in rows),
        "trainer_wait_s_median": statistics.median(r[TRAINER_WAIT] for r in rows),
        "engine_wait_s_median": statistics.median(r.get(ENGINE_WAIT, 0.0) for r in rows),
        "overlap": max(0.0, 1.0 - waited / sampled) if sampled > 0 else 0.0,
        "staleness_mean": statistics.fmean(r.get(STALENESS_MEAN, 0.0) for r in rows),
        "staleness_max": max(r.get(STALENESS_MAX, 0.0) for r in rows),
    }
