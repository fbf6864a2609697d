"""Per-shard counters and gauges, flushed as CloudWatch Embedded Metric Format (EMF) JSON lines."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import defaultdict
from typing import Protocol, TextIO

__all__ = ["NAMESPACE", "EmfMetrics", "InMemoryMetrics", "MetricsSink"]

NAMESPACE = "KinesisFleetConsumer"

_UNITS = {"MillisBehindLatest": "Milliseconds", "HandoffLatencyMs": "Milliseconds"}
_MAX_GAUGES = {"MillisBehindLatest", "PendingRecords"}
# Metrics whose every value is a sample of a distribution (alarmed on a percentile): written as EMF's array of
# values, never added up (two hand-offs of one shard in one flush are two samples, not their sum).
_SAMPLES = {"HandoffLatencyMs"}
_MAX_SAMPLES = 100  # EMF takes at most 100 values for a metric in one document


class MetricsSink(Protocol):
    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        """Add to a counter (or, for gauges such as MillisBehindLatest, record the latest value)."""
        ...

    def flush(self) -> None: ...


class InMemoryMetrics:
    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str | None], float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        with self._lock:
            if name in _MAX_GAUGES:
                self.values[(name, stream, shard)] = value
            else:
                self.values[(name, stream, shard)] += value

    def total(self, name: str) -> float:
        with self._lock:
            return sum(v for (n, _, _), v in self.values.items() if n == name)

    def flush(self) -> None:
        return None


class EmfMetrics:
    """Aggregates in memory and writes one EMF document per (stream, shard) on ``flush``.

    Each document carries two dimension sets, [Application, Stream] and [Application, Stream, Shard], so
    alarms can use the per-stream rollup while dashboards drill into shards. Counters are added up, gauges keep
    their maximum, and a distribution (``HandoffLatencyMs``) keeps each value, written as an array.

    Every (metric name, shard) of the second set is a CloudWatch custom metric of its own, billed monthly: its
    count grows with the shards (docs/protocol.md, "Quotas at scale"). ``shard_dimension=False`` keeps only
    the per-stream set, whose count does not; ``Shard`` stays in each document as a property (CloudWatch Logs
    Insights can still break a metric down by shard), it just creates no metric.
    """

    def __init__(
        self, application: str, worker_id: str, out: TextIO | None = None, *, shard_dimension: bool = True
    ) -> None:
        self._app = application
        self._worker = worker_id
        self._out = out or sys.stdout
        self._shard_dimension = shard_dimension
        self._lock = threading.Lock()
        self._values: dict[tuple[str, str | None], dict[str, float]] = defaultdict(dict)
        self._samples: dict[tuple[str, str | None], dict[str, list[float]]] = defaultdict(dict)

    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        with self._lock:
            if name in _SAMPLES:
                samples = self._samples[(stream, shard)].setdefault(name, [])
                if len(samples) < _MAX_SAMPLES:
                    samples.append(value)
                return
            bucket = self._values[(stream, shard)]
            if name in _MAX_GAUGES:
                bucket[name] = max(bucket.get(name, 0.0), value)
            else:
                bucket[name] = bucket.get(name, 0.0) + value

    def flush(self) -> None:
        with self._lock:
            values, self._values = self._values, defaultdict(dict)
            samples, self._samples = self._samples, defaultdict(dict)
        now = int(time.time() * 1000)
        for key in dict.fromkeys([*values, *samples]):  # in order of first use
            stream, shard = key
            metrics: dict[str, float | list[float]] = {**values.get(key, {}), **samples.get(key, {})}
            dims = [["Application", "Stream"]]
            doc: dict[str, object] = {"Application": self._app, "Stream": stream, "WorkerId": self._worker}
            if shard is not None:
                if self._shard_dimension:
                    dims.append(["Application", "Stream", "Shard"])
                doc["Shard"] = shard
            doc["_aws"] = {
                "Timestamp": now,
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": dims,
                        "Metrics": [{"Name": n, "Unit": _UNITS.get(n, "Count")} for n in sorted(metrics)],
                    }
                ],
            }
            doc.update(metrics)
            self._out.write(json.dumps(doc) + "\n")
        self._out.flush()
