"""Metrics: a small sink Protocol, CloudWatch Embedded Metric Format on stdout, and an in-memory sink."""

from __future__ import annotations

from consumer.metrics.sink import EmfMetrics, InMemoryMetrics, MetricsSink

__all__ = ["EmfMetrics", "InMemoryMetrics", "MetricsSink"]
