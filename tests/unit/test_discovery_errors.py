"""Discovery never stops for good: a bug in it is logged with its traceback once, counted in
``DiscoveryFailures`` (per stream), and discovery keeps running on its interval, so that the shards a reshard
makes still get their leases once the cause is gone. An expected provider error (a throttle) is retried as before.

The faults come from where they would: a shard list the parser cannot read (``BotoKinesis.list_shards`` over a
client whose answer lacks ``ShardId``), and a metrics sink of the application's own that fails while
discovery counts a throttled ListShards (an error raised inside discovery's own error handling, which
escaped it and ended the background call without an answer: the leader then waited for it for ever).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import pytest

from consumer.clock import FakeClock
from consumer.config import (
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.errors import ThrottledError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.effects import Effects
from consumer.lifecycle.lanes import BackgroundLane
from consumer.lifecycle.messages import Discover, Discovered, Event
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.kinesis import BotoKinesis, ShardInfo
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import FAST_LEASES, Journal, RecordingProcessor, start, wait_until


class _ShardListClient:
    """A Kinesis client whose ListShards answer lacks ``ShardId`` (a field read under the wrong name) until
    ``fixed``; then it lists ``shards``."""

    def __init__(self, *shard_ids: str) -> None:
        self.shard_ids = list(shard_ids)
        self.fixed = False

    def list_shards(self, **_: Any) -> dict[str, Any]:
        if not self.fixed:
            return {"Shards": [{"Id": s} for s in self.shard_ids]}
        return {"Shards": [{"ShardId": s} for s in self.shard_ids]}


def _effects(
    kinesis: Any, metrics: Any, tables: InMemoryTables, background: BackgroundLane | None = None
) -> Effects:
    nobody: Any = None
    return Effects(
        "w1",
        InMemoryLeaseRepository(tables),
        kinesis,
        ("s",),
        nobody,
        nobody,
        metrics,
        FakeClock(),
        background=background,
    )


def _tracebacks(caplog: pytest.LogCaptureFixture, kind: type[BaseException]) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None and isinstance(r.exc_info[1], kind)]


def test_a_shard_list_the_parser_cannot_read_is_counted_and_shown_once_and_discovery_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = _ShardListClient("shardId-000000000000")
    metrics, tables = InMemoryMetrics(), InMemoryTables()
    effects = _effects(BotoKinesis(client), metrics, tables)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert effects.run(Discover((), ("s",))) == Discovered(False)
    assert metrics.values[("DiscoveryFailures", "s", None)] == 3, "a failed discovery must be counted"
    assert len(_tracebacks(caplog, KeyError)) == 1, "the bug's traceback, once"
    client.fixed = True
    assert effects.run(Discover((), ("s",))) == Discovered(True, listed=frozenset({"s"}))
    assert set(tables.leases) == {("s", "shardId-000000000000")}
    assert metrics.values[("DiscoveryFailures", "s", None)] == 3


class _ThrottledListing(InMemoryKinesis):
    """ListShards over its limit while ``throttled`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.throttled = threading.Event()
        self.listed = threading.Event()  # a ListShards was answered (throttled or not)

    def list_shards(self, stream: str) -> list[ShardInfo]:
        throttled = self.throttled.is_set()
        self.listed.set()
        if throttled:
            raise ThrottledError("Kinesis throttled (list shards): LimitExceededException")
        return super().list_shards(stream)


class _FailingSink(InMemoryMetrics):
    """An application's metrics sink that fails on some metrics (its own bug, or its backend's)."""

    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        if name.startswith("Throttles."):
            raise ConnectionError("metrics backend unreachable")
        super().add(name, value, stream, shard)


def test_an_error_raised_in_discoverys_error_handling_still_answers_on_the_background_lane(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kinesis = _ThrottledListing()
    kinesis.create_stream("s", 1)
    kinesis.throttled.set()
    answers: queue.Queue[Event] = queue.Queue()
    lane = BackgroundLane("background-test", answers.put)
    metrics, tables = _FailingSink(), InMemoryTables()
    effects = _effects(kinesis, metrics, tables, lane)
    try:
        with caplog.at_level(logging.INFO):
            assert effects.run(Discover((), ("s",))) is None  # on the lane
            answer = answers.get(timeout=5)  # the leader's next discovery is counted from this answer
        assert answer == Discovered(False)
        assert [r.getMessage() for r in _tracebacks(caplog, ConnectionError)] == [
            "discovery failed unexpectedly"
        ]
        assert metrics.values[("DiscoveryFailures", "s", None)] == 1
        kinesis.throttled.clear()
        effects.run(Discover((), ("s",)))
        assert answers.get(timeout=5) == Discovered(True, listed=frozenset({"s"}))
    finally:
        lane.stop()


def test_a_leader_whose_discovery_failed_that_way_still_gives_the_shards_of_a_reshard_their_leases() -> None:
    kinesis = _ThrottledListing()
    kinesis.create_stream("s", 1)
    kinesis.throttled.set()
    tables = InMemoryTables()
    journal = Journal()
    config = WorkerConfig(
        application="app",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id="w1",
        streams=(StreamSpec("s", lambda: RecordingProcessor(journal, "w1")),),
        lease=FAST_LEASES,
        retrieval=RetrievalConfig(idle_time_between_reads=0.01, max_records=50, reads_per_second=100),
        processing=ProcessingConfig(backoff_base=0.001, backoff_max=0.01),
        shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
    )
    metrics = _FailingSink()
    worker = Worker(
        config, InMemoryLeaseRepository(tables), InMemoryCheckpointStore(tables), kinesis, metrics=metrics
    )
    thread = start(worker)
    try:
        assert kinesis.listed.wait(10), "the leader never ran discovery"  # and it was throttled
        kids = kinesis.split("s", "shardId-000000000000")  # a reshard while discovery is failing
        kinesis.throttled.clear()
        wanted = {("s", "shardId-000000000000"), *(("s", k) for k in kids)}
        wait_until(lambda: wanted <= set(tables.leases), what="leases for the shards of the reshard")
        assert metrics.total("DiscoveryFailures") >= 1
    finally:
        worker.request_shutdown()
        thread.join(10)
