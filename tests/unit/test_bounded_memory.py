"""What a worker holds stays bounded: manual mode stops fetching while too many delivered records are not
done (and says so), finished shard consumers are let go, and the leader's notes on forgotten workers do not
pile up."""

from __future__ import annotations

import threading

from consumer.config import CheckpointConfig, RetrievalConfig
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import Lease
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.records import Record
from consumer.retrieval.memory import InMemoryKinesis

from .coordinator_support import LEASES, worker
from .helpers import Journal, make_worker, start, wait_until

SHARD = "shardId-000000000000"


class NeverDoneOne(BaseProcessor):
    """Manual mode: marks every record done except the first, which it holds until ``release`` is set."""

    checkpoint_mode = "manual"

    def __init__(self, held: list[Record], delivered: list[bytes]) -> None:
        self.held, self.delivered = held, delivered

    def process_records(self, data: ProcessRecordsInput) -> None:
        for r in data.records:
            self.delivered.append(r.data)
            if not self.held:
                self.held.append(r)  # never done until the test says so
            else:
                r.done()


def test_a_record_never_done_pauses_fetching_at_the_cap_and_the_metric_says_so() -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    for i in range(400):
        kinesis.put("s", SHARD, f"r{i}".encode())
    held: list[Record] = []
    delivered: list[bytes] = []
    worker_ = make_worker(
        "w1",
        tables,
        kinesis,
        Journal(),
        checkpoint=CheckpointConfig(mode="manual", flush_interval=0.05, max_pending_records=100),
        retrieval=RetrievalConfig(
            idle_time_between_reads=0.01, max_records=30, reads_per_second=100, prefetch_batches=0
        ),
        processor=lambda: NeverDoneOne(held, delivered),
    )
    t = start(worker_)
    try:
        wait_until(lambda: worker_.metrics.total("FetchingPaused") >= 1, what="fetching paused")  # type: ignore[attr-defined]
        # The cap (100) is reached within one batch (30) of it, and nothing more is fetched while paused.
        assert 100 <= len(delivered) < 130
        fetched = kinesis.calls.get("GetRecords", 0)
        # Several of the loop's re-checks (every 50 ms) with the pause on; nothing sets this event.
        assert not threading.Event().wait(0.3)
        assert kinesis.calls.get("GetRecords", 0) == fetched
        assert len(delivered) < 130
        assert worker_.metrics.total("PendingRecords") >= 100  # type: ignore[attr-defined]
        held[0].done()  # the stuck record completes: everything behind it is done at once
        wait_until(lambda: len(delivered) == 400, what="fetching resumed to the end")
        wait_until(lambda: tables.checkpoints[("s", SHARD)].position is not None)
    finally:
        worker_.request_shutdown()
        t.join(5)
    assert delivered == [f"r{i}".encode() for i in range(400)]


def test_finished_shard_consumers_are_let_go() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 4)
    a = make_worker("a", tables, kinesis, journal)
    ta = start(a)
    wait_until(lambda: len(a.owned) == 4, what="a holds every shard")
    b = make_worker("b", tables, kinesis, journal)
    tb = start(b)
    wait_until(lambda: len(a.owned) == 2 and len(b.owned) == 2, what="balanced")
    wait_until(lambda: sum(c.finished for c in a.consumers.values()) == 2, what="two loops ended")
    a._flush_metrics()  # what the worker does every metrics interval
    assert set(a.consumers) == set(a.owned)  # the two handed over are gone, with their processors
    for w, t in ((b, tb), (a, ta)):
        w.request_shutdown()
        t.join(5)


def test_the_leaders_notes_on_forgotten_workers_are_pruned() -> None:
    v = FleetView("a", frozenset({"s"}), LEASES)
    dead = worker("d", 3)
    v.observe(TableSnapshot((Lease("s", "x"),), (worker("a"), dead)), 0.0)
    v.observe(TableSnapshot((Lease("s", "x"),), (worker("a", 2), dead)), LEASES.forget_workers_seconds)
    assert v.to_forget(LEASES.forget_workers_seconds) == [dead]
    assert v._forgetting == {("d", 3)}
    v.observe(TableSnapshot((Lease("s", "x"),), (worker("a", 3),)), LEASES.forget_workers_seconds + 1)
    assert v._forgetting == set()  # gone from the table: nothing kept about it
