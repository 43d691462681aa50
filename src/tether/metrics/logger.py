"""Metrics to ``metrics.jsonl`` (always) and to the run's trackers (``run.report_to``)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


def _clean(value):
    """JSON-safe scalars: tensors become floats, non-finite floats become strings."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricsLogger:
    """Appends one JSON object per call: ``{"stage", "step", "time", <metric>: value, ...}``; the
    run's trackers (:mod:`tether.trackers`) get the same metrics at the same step.

    ``trackers``: where the metrics also go; by default those of ``run_dir`` when it is the
    :class:`tether.runs.RunDir` that ``prepare_run_dir`` returned (none for a plain path). The
    logger never closes them: their owner does (``guarded_run``)."""

    def __init__(self, run_dir: str | Path, stage: str, trackers=None):
        from tether.common.runtime import is_main  # local: reading metrics (plots, monitors) needs no torch

        self.path = Path(run_dir) / "metrics.jsonl"
        self.stage = stage
        self.enabled = is_main()  # data parallel: rank 0 alone writes
        self._file = open(self.path, "a", encoding="utf-8") if self.enabled else None
        if trackers is None:
            trackers = getattr(run_dir, "trackers", None)
        self.trackers = trackers if self.enabled else None

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        row = {"stage": self.stage, "step": step, "time": round(time.time(), 3)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self.trackers is not None:
            self.trackers.log(step, {k: v for k, v in row.items() if k not in ("stage", "step", "time")})

    def log_table(self, name: str, step: int, rows: list[dict]) -> None:
        """``rows`` (e.g. PPO's samples) as a table named ``name`` in the trackers that have tables."""
        if self.trackers is not None:
            self.trackers.log_table(name, step, [{k: _clean(v) for k, v in row.items()} for row in rows])

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def read_metrics(path: str | Path, stage: str | None = None) -> list[dict]:
    """All rows of a ``metrics.jsonl`` (optionally of one stage)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if stage is None or row.get("stage") == stage:
                    rows.append(row)
    return rows


class JsonlWriter:
    """Appends JSON rows to a file (samples, alarms), one flushed line per row."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def write_many(self, rows: list[dict]) -> None:
        from tether.common.runtime import is_main

        if not rows or not is_main():  # data parallel: rank 0 alone writes
            return
        with open(self.path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
