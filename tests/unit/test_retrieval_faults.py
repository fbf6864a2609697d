"""Faults the emulators cannot produce, on the in-memory seams: throttling, expired iterators, fan-out
subscriptions that fail or break, checkpoint writes that fail, and a shard failing past the give-up bound.

(Over the network, refused, reset and slow connections are injected by tests/integration/test_faults.py.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from consumer.checkpoint.store import CheckpointItem
from consumer.config import LeaseConfig, RetrievalConfig
from consumer.errors import TransientError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryTables
from consumer.records import Position
from consumer.retrieval.kinesis import ThrottledError
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until

SHARD = "shardId-000000000000"
POLLING = RetrievalConfig(
    idle_time_between_reads=0.01, max_records=50, reads_per_second=100, backoff_base=0.01, backoff_max=0.05
)
FANOUT = RetrievalConfig(
    mode="fanout",
    fanout_consumer_name="efo",
    backoff_base=0.01,
    backoff_max=0.05,
    fanout_subscribe_interval=0.01,
)


class Faulty:
    """Wraps an API; while ``failing`` is set, the named calls raise what ``error()`` makes."""

    def __init__(self, inner: Any, calls: set[str], error: Callable[[], Exception]) -> None:
        self.inner = inner
        self.calls = calls
        self.error = error
        self.failing = threading.Event()
        self.raised = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in self.calls:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.failing.is_set():
                self.raised += 1
                raise self.error()
            return attr(*args, **kwargs)

        return call


def _run_through_fault(
    faulty: Faulty, kinesis: InMemoryKinesis, journal: Journal, worker: Any, *, until: int = 3
) -> list[str]:
    t = start(worker)
    first = [kinesis.put("s", SHARD, f"a{i}".encode()) for i in range(10)]
    wait_until(lambda: len(journal.deliveries) == 10)
    faulty.failing.set()
    during = [kinesis.put("s", SHARD, f"b{i}".encode()) for i in range(10)]
    wait_until(lambda: faulty.raised >= until, what="the fault to be hit")
    faulty.failing.clear()
    after = [kinesis.put("s", SHARD, f"c{i}".encode()) for i in range(10)]
    wait_until(lambda: len(journal.deliveries) >= 30, what="everything delivered after the fault")
    worker.request_shutdown()
    t.join(5)
    return first + during + after


def test_throttled_reads_are_retried_in_place_nothing_skipped_nothing_twice() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    faulty = Faulty(
        kinesis, {"get_records"}, lambda: ThrottledError("ProvisionedThroughputExceededException")
    )
    worker = make_worker("a", tables, faulty, journal, retrieval=POLLING)  # type: ignore[arg-type]
    put = _run_through_fault(faulty, kinesis, journal, worker)
    assert journal.sequences(SHARD) == put
    assert [e for _, _, e in journal.events if e == "lease_lost"] == []


def test_an_expired_iterator_resumes_after_the_last_record_fetched() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    worker = make_worker("a", tables, kinesis, journal, retrieval=POLLING)
    t = start(worker)
    put = [kinesis.put("s", SHARD, f"a{i}".encode()) for i in range(5)]
    wait_until(lambda: len(journal.deliveries) == 5)
    kinesis.expire_next.add(SHARD)
    put += [kinesis.put("s", SHARD, f"b{i}".encode()) for i in range(5)]
    wait_until(lambda: len(journal.deliveries) == 10)
    worker.request_shutdown()
    t.join(5)
    assert journal.sequences(SHARD) == put
    assert not kinesis.expire_next  # it was hit


def test_fanout_subscriptions_refused_then_broken_mid_stream_resume_at_the_continuation() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.events_per_subscription = 4
    kinesis.create_stream("s", 1)
    faulty = Faulty(kinesis, {"subscribe"}, lambda: TransientError("SubscribeToShard: connection reset"))
    worker = make_worker("a", tables, faulty, journal, retrieval=FANOUT)  # type: ignore[arg-type]
    put = _run_through_fault(faulty, kinesis, journal, worker)
    assert journal.sequences(SHARD) == put


def test_checkpoint_writes_that_fail_are_sent_again_and_the_checkpoint_catches_up() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    made: list[Faulty] = []

    def wrap(store: InMemoryCheckpointStore) -> Faulty:
        made.append(Faulty(store, {"save"}, lambda: TransientError("UpdateItem: timed out")))
        return made[-1]

    worker = make_worker("a", tables, kinesis, journal, retrieval=POLLING, wrap_checkpoints=wrap)
    faulty = made[0]
    put = _run_through_fault(faulty, kinesis, journal, worker, until=2)
    assert journal.sequences(SHARD) == put
    stored: CheckpointItem | None = InMemoryCheckpointStore(tables).get("s", SHARD)
    assert stored is not None and stored.position == Position(put[-1])


def test_a_shard_failing_past_the_give_up_bound_goes_to_another_worker_which_resumes_it() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    lease = LeaseConfig(
        lease_duration=1.0,
        safety_margin=0.3,
        scan_interval=0.1,
        inbox_poll_interval=0.02,
        give_up_after=0.5,
        idle_poll_interval=0.05,
        leader_check_interval=0.05,
    )
    faulty = Faulty(kinesis, {"get_records", "get_shard_iterator"}, lambda: TransientError("refused"))
    a = make_worker("a", tables, faulty, journal, retrieval=POLLING, lease=lease)  # type: ignore[arg-type]
    ta = start(a)
    first = [kinesis.put("s", SHARD, f"a{i}".encode()) for i in range(5)]
    wait_until(lambda: len(journal.deliveries) == 5)
    b = make_worker("b", tables, kinesis, journal, retrieval=POLLING, lease=lease)
    tb = start(b)
    wait_until(lambda: any(w == "b" for w in (x.worker_id for x in tables.workers.values())))
    faulty.failing.set()  # only a's reads fail, for good
    later = [kinesis.put("s", SHARD, f"b{i}".encode()) for i in range(5)]
    wait_until(lambda: len(journal.deliveries) >= 10, timeout=10, what="b to resume the shard")
    assert [d[0] for d in journal.deliveries[5:]] == ["b"] * 5
    assert a.metrics.total("ShardsGivenUp") == 1  # type: ignore[attr-defined]
    epochs = [d[4] for d in journal.deliveries]
    assert epochs == sorted(epochs)  # never two owners at once
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(5)
    assert journal.sequences(SHARD)[:10] == first + later
