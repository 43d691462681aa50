"""Metrics to ``metrics.jsonl`` (always) and TensorBoard (optional, if installed)."""

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
    """Appends one JSON object per call: ``{"stage", "step", "time", <metric>: value, ...}``."""

    def __init__(self, run_dir: str | Path, stage: str, tensorboard: bool = False):
        from tether.runtime import is_main  # local: reading metrics (plots, monitors) needs no torch

        self.path = Path(run_dir) / "metrics.jsonl"
        self.stage = stage
        self.enabled = is_main()  # data parallel: rank 0 alone writes
        self._file = open(self.path, "a", encoding="utf-8") if self.enabled else None
        self._tb = None
        if tensorboard and self.enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))
            except ImportError:
                self._tb = None

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        row = {"stage": self.stage, "step": step, "time": round(time.time(), 3)}
        row.update({k: _clean(v) for k, v in metrics.items()})
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key not in ("step", "time"):
                    self._tb.add_scalar(f"{self.stage}/{key}", value, step)

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


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
        from tether.runtime import is_main

        if not rows or not is_main():  # data parallel: rank 0 alone writes
            return
        with open(self.path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps({k: _clean(v) for k, v in row.items()}) + "\n")
