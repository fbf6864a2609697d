"""A requested stop (a hand-off) lets the poll under way finish and delivers what it brings before the final
checkpoint; a poll that hangs is cut off after one pacing interval and a grace. A lost lease stops at once, and
so does the poll under way at a release to nobody (a shutdown with no successor)."""

from __future__ import annotations

import queue
import threading

import pytest

from consumer.config import RetrievalConfig
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.messages import Outcome, ShardFinished
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.retrieval.kinesis import GetRecordsResult
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, RecordingProcessor, lone_shard_consumer

PACING = 0.5  # the hang test waits on the grace path: PACING + 0.5 s


class WatchedKinesis(InMemoryKinesis):
    """Says when each GetRecords starts; holds the third and later ones until released."""

    def __init__(self) -> None:
        super().__init__()
        self.started: queue.Queue[int] = queue.Queue()
        self.release = threading.Event()
        self._n = 0

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        self._n += 1
        self.started.put(self._n)
        if self._n >= 3:
            self.release.wait(10)
        return super().get_records(iterator, limit)


def _consumer(
    kinesis: WatchedKinesis, journal: Journal, prefetch: int
) -> tuple[ShardConsumer, queue.Queue[ShardFinished], InMemoryTables]:
    retrieval = RetrievalConfig(
        idle_time_between_reads=PACING, prefetch_batches=prefetch, initial_position="TRIM_HORIZON"
    )
    consumer, finished, tables, _ = lone_shard_consumer(
        kinesis, lambda: RecordingProcessor(journal, "w1"), retrieval
    )
    return consumer, finished, tables


def _start_until_the_third_poll(kinesis: WatchedKinesis, consumer: ShardConsumer) -> str:
    """Start with one record (the first poll brings it, the second nothing); return once the third poll is
    under way: it reads the shard when ``release`` is set."""
    shard = consumer.lease.shard_id
    kinesis.put("s", shard, b"first")
    consumer.start()
    while kinesis.started.get(timeout=5) != 3:
        pass
    return shard


@pytest.mark.parametrize("prefetch", [0, 1])
def test_a_requested_stop_delivers_what_the_poll_under_way_brings_then_checkpoints_it(prefetch: int) -> None:
    kinesis, journal = WatchedKinesis(), Journal()
    consumer, finished, tables = _consumer(kinesis, journal, prefetch)
    shard = _start_until_the_third_poll(kinesis, consumer)
    second = kinesis.put("s", shard, b"second")
    consumer.stop(ShutdownReason.REQUESTED)  # while the third poll is under way
    kinesis.release.set()  # it reads the shard now: "second" is there
    done = finished.get(timeout=5)
    consumer.join(5)
    assert done.outcome is Outcome.STOPPED
    assert [d[0] for d in journal.deliveries] == ["w1", "w1"]
    assert journal.sequences()[-1] == second  # delivered by this owner, not left for the next
    assert tables.checkpoints[("s", shard)].position.sequence == second  # type: ignore[union-attr]


def test_a_poll_that_hangs_does_not_hold_the_hand_off() -> None:
    """The third poll is never released (a slow network)."""
    kinesis, journal = WatchedKinesis(), Journal()
    consumer, finished, tables = _consumer(kinesis, journal, 1)
    shard = _start_until_the_third_poll(kinesis, consumer)
    consumer.stop(ShutdownReason.REQUESTED)
    done = finished.get(timeout=PACING + 2.0)  # cut off after one pacing interval and a grace
    kinesis.release.set()
    consumer.join(5)
    assert done.outcome is Outcome.STOPPED
    assert len(journal.deliveries) == 1
    first = journal.sequences()[0]
    assert tables.checkpoints[("s", shard)].position.sequence == first  # type: ignore[union-attr]


def test_a_lost_lease_does_not_wait_for_the_poll_under_way() -> None:
    kinesis, journal = WatchedKinesis(), Journal()
    consumer, finished, _ = _consumer(kinesis, journal, 1)
    shard = _start_until_the_third_poll(kinesis, consumer)
    kinesis.put("s", shard, b"second")
    consumer.stop(ShutdownReason.LEASE_LOST)
    done = finished.get(timeout=0.7)  # not the grace path (PACING + 0.5 s), nor the held call (10 s)
    kinesis.release.set()
    consumer.join(5)
    assert done.outcome is Outcome.LOST
    assert len(journal.deliveries) == 1


def test_a_release_to_nobody_does_not_wait_for_the_poll_under_way_and_checkpoints_what_it_delivered() -> None:
    """A shutdown that releases its leases (nobody is about to read after this owner): the held poll is cut
    off at once, and the final checkpoint is the last record delivered, so the next owner starts right after it."""
    kinesis, journal = WatchedKinesis(), Journal()
    consumer, finished, tables = _consumer(kinesis, journal, 1)
    shard = _start_until_the_third_poll(kinesis, consumer)
    kinesis.put("s", shard, b"second")
    consumer.stop(ShutdownReason.REQUESTED, last_poll=False)
    done = finished.get(timeout=PACING + 0.2)  # not the grace path (PACING + 0.5 s), nor the held call (10 s)
    kinesis.release.set()
    consumer.join(5)
    assert done.outcome is Outcome.STOPPED
    assert len(journal.deliveries) == 1  # "second" is left for the next owner
    first = journal.sequences()[0]
    assert tables.checkpoints[("s", shard)].position.sequence == first  # type: ignore[union-attr]
