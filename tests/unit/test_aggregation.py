"""KPL-aggregated records: de-aggregated with aws-kinesis-agg, delivered with sub-sequence numbers, and a
checkpoint inside an aggregate resumes at the next sub-record."""

from __future__ import annotations

import json

from aws_kinesis_agg.aggregator import AggRecord

from consumer.config import CheckpointConfig
from consumer.leases.memory import InMemoryTables
from consumer.metrics.sink import EmfMetrics
from consumer.records import Position
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until


def aggregate(payloads: list[bytes]) -> bytes:
    agg = AggRecord()
    for i, p in enumerate(payloads):
        agg.add_user_record(f"pk-{i}", p)
    _pk, _ehk, data = agg.get_contents()
    return bytes(data)


def test_aggregated_records_are_split_and_resume_mid_aggregate() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = "shardId-000000000000"
    plain = kinesis.put("s", shard, b"plain")
    agg_seq = kinesis.put("s", shard, aggregate([f"sub{i}".encode() for i in range(5)]))
    w = make_worker(
        "w1", tables, kinesis, journal, checkpoint=CheckpointConfig(mode="manual", flush_interval=0.01)
    )
    t = start(w)
    wait_until(lambda: len(journal.deliveries) == 6)
    wait_until(lambda: tables.checkpoints[("s", shard)].position == Position(agg_seq, 4))
    w.request_shutdown()
    t.join(5)
    assert [(d[2], d[3]) for d in journal.deliveries] == [(plain, 0)] + [(agg_seq, i) for i in range(5)]
    # Pretend the first owner stopped after sub-record 2: the next owner starts at sub-record 3.
    item = tables.checkpoints[("s", shard)]
    tables.checkpoints[("s", shard)] = item.__class__(
        item.stream, item.shard_id, item.epoch, Position(agg_seq, 2)
    )
    journal2 = Journal()
    w2 = make_worker("w2", tables, kinesis, journal2)
    t2 = start(w2)
    wait_until(lambda: len(journal2.deliveries) == 2)
    w2.request_shutdown()
    t2.join(5)
    assert [(d[2], d[3]) for d in journal2.deliveries] == [(agg_seq, 3), (agg_seq, 4)]


def test_emf_document_shape() -> None:
    import io

    out = io.StringIO()
    m = EmfMetrics("app", "w1", out)
    m.add("RecordsProcessed", 3, "orders", "shardId-1")
    m.add("RecordsProcessed", 2, "orders", "shardId-1")
    m.add("MillisBehindLatest", 500, "orders", "shardId-1")
    m.add("MillisBehindLatest", 200, "orders", "shardId-1")
    m.add("HandoffLatencyMs", 120, "orders", "shardId-1")
    m.add("HandoffLatencyMs", 80, "orders", "shardId-1")
    m.flush()
    doc = json.loads(out.getvalue())
    assert (
        doc["RecordsProcessed"] == 5 and doc["MillisBehindLatest"] == 500
    )  # counters add, lag takes the max
    # Two hand-offs of the shard in one flush are two samples of the latency (its p99 is alarmed on), not a sum.
    assert doc["HandoffLatencyMs"] == [120, 80]
    meta = doc["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == "KinesisFleetConsumer"
    assert meta["Dimensions"] == [["Application", "Stream"], ["Application", "Stream", "Shard"]]
    assert {"Name": "MillisBehindLatest", "Unit": "Milliseconds"} in meta["Metrics"]
    assert doc["Application"] == "app" and doc["Stream"] == "orders" and doc["Shard"] == "shardId-1"
    out.truncate(0)
    m.flush()
    assert out.getvalue().strip() == ""  # nothing new, nothing written
