"""Metric logging. Metric names are API: see docs/metrics.md."""

from tether.metrics.logger import MetricsLogger, read_metrics

__all__ = ["MetricsLogger", "read_metrics"]
