"""Enhanced fan-out retrieval on the in-memory implementation of its seam.

kinesis-local serves SubscribeToShard but sends no initial-response event, which boto3 requires; making it work
needs a patch of botocore, which integration tests here must not do. So fan-out is tested through the
``FanOutApi`` Protocol (docs/architecture.md says so); polling is tested against the emulator.
"""

from __future__ import annotations

from consumer.config import RetrievalConfig
from consumer.leases.memory import InMemoryTables
from consumer.retrieval.memory import InMemoryKinesis

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
