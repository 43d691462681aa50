"""Metric logging. Metric names are API: see docs/metrics.md."""

from tether.metrics.logger import JsonlWriter, MetricsLogger, read_metrics

__all__ = ["JsonlWriter", "MetricsLogger", "read_metrics"]
