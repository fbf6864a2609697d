"""The per-stream gauges (``LeasesHeld``, ``HaltedShards``, ``ProcessorCallsSlow``) are sent for every stream
the worker consumes, 0 included. Before, a worker that held no lease of a stream sent none of them, and a
stopping worker's last flush left each at its last value (the soak audit: ``LeasesHeld 1`` then nothing)."""

from __future__ import annotations

from consumer.leases.memory import InMemoryTables
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, make_worker


def test_a_worker_holding_nothing_sends_each_gauge_as_zero_for_each_stream() -> None:
    kinesis = InMemoryKinesis()
    for stream in ("s", "t"):
        kinesis.create_stream(stream, 1)
    worker = make_worker("w", InMemoryTables(), kinesis, Journal(), streams=("s", "t"))
    assert isinstance(worker.metrics, InMemoryMetrics)
    assert not worker.owned
    worker._flush_metrics()
    for name in ("LeasesHeld", "HaltedShards", "ProcessorCallsSlow"):
        for stream in ("s", "t"):
            sent = dict(worker.metrics.values)  # a copy: reading the defaultdict would add the key
            assert sent.get((name, stream, None)) == 0, (name, stream, sent)
