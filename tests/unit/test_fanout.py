"""Enhanced fan-out retrieval on the in-memory implementation of its seam.

kinesis-local serves SubscribeToShard but sends no initial-response event, which boto3 requires; making it work
needs a patch of botocore, which integration tests here must not do. So fan-out is tested through the
``FanOutApi`` Protocol (docs/architecture.md says so); polling is tested against the emulator.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from consumer.config import RetrievalConfig, ThreadsConfig
from consumer.leases.memory import InMemoryTables
from consumer.retrieval.kinesis import SubscriptionEvent
from consumer.retrieval.memory import InMemoryKinesis, _MemorySubscription

from .helpers import Journal, make_worker, start, wait_until

FANOUT = RetrievalConfig(
    mode="fanout",
    fanout_consumer_name="app-efo",
    backoff_base=0.01,
    backoff_max=0.05,
    fanout_subscribe_interval=0.01,  # the in-memory Kinesis has no rate limit; renewals come every 3 events
)


def test_fanout_delivers_everything_across_renewed_subscriptions_and_a_split() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.events_per_subscription = 3  # subscriptions end often, like the real 5-minute ones
    kinesis.create_stream("s", 2)
    put = {
        f"shardId-{i:012d}": [kinesis.put("s", f"shardId-{i:012d}", f"{i}-{n}".encode()) for n in range(30)]
        for i in range(2)
    }
    kinesis.busy_subscriptions.add("shardId-000000000001")  # ResourceInUse once: retried
    worker = make_worker("w1", tables, kinesis, journal, retrieval=FANOUT)
    t = start(worker)
    wait_until(lambda: len(journal.deliveries) == 60)
    kids = kinesis.split("s", "shardId-000000000000")
    later = {kid: [kinesis.put("s", kid, b"k") for _ in range(5)] for kid in kids}
    wait_until(lambda: len(journal.deliveries) == 70, what="children via fan-out")
    worker.request_shutdown()
    t.join(5)
    for shard, seqs in {**put, **later}.items():
        assert journal.sequences(shard) == seqs
    assert kinesis.calls["RegisterStreamConsumer"] == 1
    assert kinesis.calls["SubscribeToShard"] > 6  # renewed, not one long subscription


def test_fanout_hand_off_interrupts_the_subscription() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.events_per_subscription = 10_000  # a long-lived subscription: the hand-off must close it
    kinesis.create_stream("s", 2)
    a = make_worker("a", tables, kinesis, journal, retrieval=FANOUT)
    ta = start(a)
    wait_until(lambda: len(a.owned) == 2)
    b = make_worker("b", tables, kinesis, journal, retrieval=FANOUT)
    tb = start(b)
    wait_until(lambda: len(b.owned) == 1 and len(a.owned) == 1, what="one lease handed to b")
    seqs = {
        s: [kinesis.put("s", s, b"x") for _ in range(5)]
        for s in ("shardId-000000000000", "shardId-000000000001")
    }
    wait_until(lambda: len(journal.deliveries) == 10)
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(5)
    for shard, expected in seqs.items():
        assert journal.sequences(shard) == expected


class _WaitingSubscription(_MemorySubscription):
    """A subscription as AWS serves one: an event only when records come (or a heartbeat after ``quiet``), so a
    fetch holds its thread while the shard is quiet."""

    def __init__(self, kinesis: WaitingKinesis, iterator: str) -> None:
        super().__init__(kinesis, iterator, limit=0)
        self._waiting = kinesis

    def __iter__(self) -> Iterator[SubscriptionEvent]:
        while not self._closed.is_set() and self._iterator is not None:
            result = self._k.get_records(self._iterator, 100)
            if not result.records:
                with self._waiting.put_cond:
                    self._waiting.put_cond.wait(self._waiting.quiet)
                if self._closed.is_set():
                    return
                result = self._k.get_records(self._iterator, 100)
            self._iterator = result.next_iterator
            last = result.records[-1]["SequenceNumber"] if result.records else None
            yield SubscriptionEvent(result.records, last or self._continuation_of(result), 0)

    def close(self) -> None:
        super().close()
        with self._waiting.put_cond:
            self._waiting.put_cond.notify_all()


class WaitingKinesis(InMemoryKinesis):
    quiet = 30.0  # longer than the test: a quiet shard's subscription holds its thread throughout

    def __init__(self) -> None:
        super().__init__()
        self.put_cond = threading.Condition()

    def put(self, stream: str, shard_id: str, data: bytes) -> str:
        seq = super().put(stream, shard_id, data)
        with self.put_cond:
            self.put_cond.notify_all()
        return seq

    def subscribe(
        self, consumer_arn: str, shard_id: str, position_type: str, **kw: Any
    ) -> _WaitingSubscription:
        opened = super().subscribe(consumer_arn, shard_id, position_type, **kw)  # counted, positioned as ever
        assert opened._iterator is not None
        return _WaitingSubscription(self, opened._iterator)


def test_fanout_reads_every_shard_at_once_even_past_fetch_threads() -> None:
    """Six quiet shards, two fetch threads: every subscription still waits on a thread of its own, so a
    record on any shard is delivered at once, not when a quiet shard's subscription lets its thread go."""
    tables, kinesis, journal = InMemoryTables(), WaitingKinesis(), Journal()
    kinesis.create_stream("s", 6)
    worker = make_worker(
        "w1", tables, kinesis, journal, retrieval=FANOUT, threads=ThreadsConfig(fetch_threads=2)
    )
    t = start(worker)
    try:
        wait_until(lambda: len(worker.owned) == 6, what="every lease owned")
        for i, shard in enumerate(s.shard_id for s in kinesis.list_shards("s")):
            kinesis.put("s", shard, b"x")
            wait_until(
                lambda n=i + 1: len(journal.deliveries) == n, timeout=10, what=f"the record on {shard}"
            )
    finally:
        worker.request_shutdown()
        t.join(10)
    assert not t.is_alive()
