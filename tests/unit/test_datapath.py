"""The per-record path: one ``Record`` per record built from the wire dict, KPL only for aggregates;
GetRecords pacing; fetch-ahead end to end (its promises one by one: test_shard_runner.py)."""

from __future__ import annotations

import threading
import time
from base64 import b64decode
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import AggRecord
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

from consumer.config import ConfigError, RetrievalConfig, StreamSpec, WorkerConfig
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Position
from consumer.retrieval.kinesis import WireRecord, to_records
from consumer.retrieval.memory import InMemoryKinesis
from consumer.retrieval.polling import PollingReader
from consumer.retrieval.reader import Fetch

from .helpers import FAST_LEASES, Journal, RecordingProcessor, start, wait_until

SHARD = "shardId-000000000000"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def wire(seq: int, data: bytes, pk: str = "pk") -> WireRecord:
    return {"SequenceNumber": str(seq), "PartitionKey": pk, "Data": data, "ApproximateArrivalTimestamp": NOW}


def kpl(*payloads: bytes) -> bytes:
    agg = AggRecord()
    for i, p in enumerate(payloads):
        agg.add_user_record(f"sub-{i}", p)
    return bytes(agg.get_contents()[2])


def test_plain_records_are_built_once_from_the_wire_and_only_aggregates_are_split() -> None:
    plain = wire(1, b'{"a": 1}')
    batch = [plain, wire(2, kpl(b"x", b"y", b"z"), pk="agg"), wire(3, b"tail")]
    records = to_records("s", SHARD, batch)
    assert [(r.sequence_number, r.sub_sequence_number, r.aggregated) for r in records] == [
        ("1", 0, False),
        ("2", 0, True),
        ("2", 1, True),
        ("2", 2, True),
        ("3", 0, False),
    ]
    assert records[0].data is plain["Data"]  # the payload itself: no copy, no format conversion
    assert [r.data for r in records[1:4]] == [b"x", b"y", b"z"]
    assert [r.partition_key for r in records[1:4]] == ["sub-0", "sub-1", "sub-2"]
    assert records[0].json() == {"a": 1} and records[0].approximate_arrival == NOW
    assert {(r.stream, r.shard_id) for r in records} == {("s", SHARD)}


def test_aggregates_split_as_aws_kinesis_agg_splits_them() -> None:
    agg, hash_keys = AggRecord(), []
    for i in range(50):
        hash_keys.append(str(2**127 + i) if i % 3 == 0 else None)
        agg.add_user_record(f"pk-{i % 7}", bytes([i]) * (i + 1), hash_keys[-1])
    w = wire(9, bytes(agg.get_contents()[2]))
    ours = to_records("s", SHARD, [w])
    theirs = [u["kinesis"] for u in iter_deaggregate_records(w, data_format="Boto3")]
    assert len(ours) == len(theirs) == 50
    assert [(r.sequence_number, r.sub_sequence_number, r.partition_key, r.data) for r in ours] == [
        (k["sequenceNumber"], k["subSequenceNumber"], k["partitionKey"], b64decode(k["data"])) for k in theirs
    ]
    # The explicit hash keys as put: the library gives records put without one the table's first key
    # (it reads the unset protobuf index as 0).
    assert [r.explicit_hash_key for r in ours] == hash_keys


def test_a_record_with_the_magic_but_a_broken_digest_is_delivered_as_it_is() -> None:
    broken = bytearray(kpl(b"x", b"y"))
    broken[-1] ^= 0xFF
    (record,) = to_records("s", SHARD, [wire(7, bytes(broken))])
    assert record.data == bytes(broken) and not record.aggregated and record.sub_sequence_number == 0


def test_records_are_immutable_and_compare_by_their_fields() -> None:
    a, b = to_records("s", SHARD, [wire(1, b"x")]) + to_records("s", SHARD, [wire(1, b"x")])
    assert a == b and hash(a) == hash(b) and a.position == Position("1", 0)
    with pytest.raises(AttributeError):
        a.data = b"y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        a.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        a.done()  # only in manual mode


# Fetch-ahead (bounded, ordered, failures to the machine's retry policy, dropped at a stop, nothing after the
# shard's end) is the shard runner's: tests/unit/test_shard_runner.py.


class TimedKinesis:
    def __init__(self, inner: InMemoryKinesis) -> None:
        self.inner = inner
        self.starts: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_records(self, iterator: str, limit: int) -> Any:
        self.starts.append(time.monotonic())
        return self.inner.get_records(iterator, limit)


def test_getrecords_calls_are_paced_at_the_idle_time_even_with_a_backlog() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    for i in range(20):
        kinesis.put("s", SHARD, f"r{i}".encode())
    timed = TimedKinesis(kinesis)
    cfg = RetrievalConfig(idle_time_between_reads=0.2, max_records=5)
    reader = PollingReader(timed, "s", SHARD, cfg, after=None, initial_position="TRIM_HORIZON")  # type: ignore[arg-type]
    got = [reader.fetch() for _ in range(4)]
    assert [len(f.records) for f in got if f is not None] == [5, 5, 5, 5]
    gaps = [b - a for a, b in zip(timed.starts, timed.starts[1:], strict=False)]
    assert min(gaps) >= 0.2 - 0.005  # never more than 5 GetRecords a second for this shard


def test_interrupt_ends_a_wait_for_the_next_call_at_once() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    cfg = RetrievalConfig(idle_time_between_reads=30.0)
    reader = PollingReader(kinesis, "s", SHARD, cfg, after=None, initial_position="TRIM_HORIZON")
    assert reader.fetch() is not None
    results: list[Fetch | None] = []
    t = threading.Thread(target=lambda: results.append(reader.fetch()))
    t.start()
    reader.interrupt()
    t.join(5)
    assert not t.is_alive() and results == [None]


def test_prefetch_setting_is_validated_and_named_in_errors() -> None:
    assert RetrievalConfig().prefetch_batches == 1
    with pytest.raises(ConfigError, match=r"retrieval\.prefetch_batches"):
        RetrievalConfig(prefetch_batches=17)


class SlowProcessor(RecordingProcessor):
    """Works 20 ms per batch, so that the next batch is fetched ahead while it does."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        time.sleep(0.02)
        super().process_records(data)


def _worker(
    name: str, tables: InMemoryTables, kinesis: InMemoryKinesis, journal: Journal, prefetch: int
) -> Worker:
    factory: Callable[[], SlowProcessor] = lambda: SlowProcessor(journal, name)  # noqa: E731
    config = WorkerConfig(
        application="app",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id=name,
        streams=(StreamSpec("s", factory),),
        lease=FAST_LEASES,
        retrieval=RetrievalConfig(
            idle_time_between_reads=0.0, max_records=5, reads_per_second=100, prefetch_batches=prefetch
        ),
    )
    return Worker(
        config,
        InMemoryLeaseRepository(tables),
        InMemoryCheckpointStore(tables),
        kinesis,
        metrics=InMemoryMetrics(),
    )


@pytest.mark.parametrize("prefetch", [1, 4])
def test_a_handoff_with_batches_fetched_ahead_delivers_each_record_once_in_order(prefetch: int) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 2)
    shards = [f"shardId-{i:012d}" for i in range(2)]
    put = {s: [kinesis.put("s", s, f"{s}-{i}".encode()) for i in range(150)] for s in shards}
    a = _worker("a", tables, kinesis, journal, prefetch)
    ta = start(a)
    wait_until(lambda: len(journal.deliveries) >= 40, what="a to be reading both shards")
    b = _worker("b", tables, kinesis, journal, prefetch)  # b asks a for one shard mid-backlog
    tb = start(b)
    wait_until(lambda: any(d[0] == "b" for d in journal.deliveries), what="a hand-off to b")
    wait_until(lambda: len(journal.deliveries) >= 300, timeout=30, what="the whole backlog")
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(10)
    for shard in shards:
        assert journal.sequences(shard) == put[shard]  # nothing twice, nothing skipped, in order
        epochs = [d[4] for d in journal.deliveries if d[1] == shard]
        assert epochs == sorted(epochs)  # the old owner delivered nothing after the new one started
