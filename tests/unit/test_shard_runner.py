"""The shard runner: every shard machine on a scheduler and two bounded pools, not a thread per shard.

Most tests run on made-up time: the scheduler is stepped by ``run_once``, the pools run their jobs only when
the test says (``HeldPool``), and the clock moves only when told. The last ones run on real threads, to show
what the pools promise: one processor call per shard at a time, in order, and a blocked processor holding
no other shard.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from consumer.checkpoint.store import CheckpointItem
from consumer.clock import Clock, FakeClock, SystemClock
from consumer.config import CheckpointConfig, RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.errors import TransientError
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryTables
from consumer.leases.model import Lease
from consumer.lifecycle.messages import Outcome, ShardFinished
from consumer.lifecycle.pools import GrowingPool, Job, Pool
from consumer.lifecycle.processor import (
    BaseProcessor,
    InitializationInput,
    ProcessRecordsInput,
    ShutdownReason,
)
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.shard_messages import ShardEvent
from consumer.lifecycle.shard_runner import ShardRunner
from consumer.lifecycle.shard_start import ConsumerContext
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.retrieval.kinesis import GetRecordsResult
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, RecordingProcessor, wait_until

IDLE = 0.25  # the pacing interval of an idle shard


class HeldPool:
    """A pool whose jobs run when the test says, in the order they came."""

    def __init__(self) -> None:
        self.jobs: deque[Job] = deque()

    def submit(self, job: Job) -> None:
        self.jobs.append(job)

    def close(self) -> None:
        self.jobs.clear()

    def relieve(self) -> None:
        return None

    def run(self) -> int:
        ran = 0
        while self.jobs:
            self.jobs.popleft()()
            ran += 1
        return ran


class CountingKinesis(InMemoryKinesis):
    def __init__(self) -> None:
        super().__init__()
        self.polls = 0

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        self.polls += 1
        return super().get_records(iterator, limit)


class Rig:
    """``shards`` shard consumers of stream ``s`` on one runner, each checkpointed at nothing yet."""

    def __init__(
        self,
        shards: int,
        processor: Callable[[], Any],
        *,
        retrieval: RetrievalConfig | None = None,
        checkpoint: CheckpointConfig | None = None,
        clock: Clock | None = None,
        fetches: Pool | None = None,
        lanes: Pool | None = None,
        kinesis: CountingKinesis | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.kinesis = kinesis or CountingKinesis()
        self.kinesis.create_stream("s", shards)
        self.shards = [s.shard_id for s in self.kinesis.list_shards("s")]
        self.tables = InMemoryTables()
        for shard in self.shards:
            self.tables.checkpoints[("s", shard)] = CheckpointItem("s", shard, 1, None)
        config = WorkerConfig(
            application="app",
            lease_table="leases",
            checkpoint_table="checkpoints",
            worker_id="w1",
            streams=(StreamSpec("s", processor),),
            retrieval=retrieval or RetrievalConfig(idle_time_between_reads=IDLE, max_records=10),
            checkpoint=checkpoint or CheckpointConfig(),
            shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
        )
        validity = OwnValidity(self.clock, 600.0)
        validity.extend(self.clock.monotonic())
        self.finished: queue.Queue[ShardFinished] = queue.Queue()
        self.fetches, self.lanes = fetches or HeldPool(), lanes or HeldPool()
        threaded = not isinstance(self.fetches, HeldPool)
        self.runner = ShardRunner(self.clock, self.fetches, self.lanes, threaded=threaded)
        ctx = ConsumerContext(
            config,
            self.kinesis,
            InMemoryCheckpointStore(self.tables),
            None,
            InMemoryMetrics(),
            validity,
            self.clock,
            self.finished.put,
            runner=self.runner,
        )
        self.consumers = [
            ShardConsumer(Lease("s", sh, "w1", 1), config.streams[0], ctx) for sh in self.shards
        ]

    def add(self) -> None:
        """Hand every consumer to the runner (stepped by the test, on held pools)."""
        for consumer in self.consumers:
            consumer.start()

    def settle(self, *, fetch: bool = True, lanes: bool = True) -> None:
        """Step the runner and run the jobs it hands out until nothing more happens (time stands still)."""
        assert isinstance(self.fetches, HeldPool) and isinstance(self.lanes, HeldPool)
        for _ in range(1000):
            self.runner.run_once()
            ran = (self.fetches.run() if fetch else 0) + (self.lanes.run() if lanes else 0)
            if not ran and self.runner.idle:
                return
        raise AssertionError("the runner did not settle")

    def outcomes(self) -> list[Outcome]:
        out = []
        while not self.finished.empty():
            out.append(self.finished.get_nowait().outcome)
        return out


def _recording(journal: Journal) -> Callable[[], RecordingProcessor]:
    return lambda: RecordingProcessor(journal, "w1")


def test_a_poll_waits_for_its_pacing_slot_on_a_timer_not_on_a_thread() -> None:
    journal = Journal()
    rig = Rig(1, _recording(journal))
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.add()
    rig.settle()
    assert journal.sequences() and rig.kinesis.polls == 1
    assert not rig.fetches.jobs  # type: ignore[attr-defined]
    rig.clock.advance(IDLE - 0.01)  # type: ignore[attr-defined]
    rig.settle()
    assert rig.kinesis.polls == 1, "a poll started before its pacing slot"
    rig.clock.advance(0.02)  # type: ignore[attr-defined]
    rig.settle()
    assert rig.kinesis.polls == 2


def test_fetches_run_ahead_of_a_delivery_up_to_the_depth_and_no_further() -> None:
    journal = Journal()
    retrieval = RetrievalConfig(
        idle_time_between_reads=0.0, max_records=1, reads_per_second=100, prefetch_batches=2
    )
    rig = Rig(1, _recording(journal), retrieval=retrieval)
    for i in range(10):
        rig.kinesis.put("s", rig.shards[0], f"r{i}".encode())
    rig.add()
    rig.runner.run_once()
    assert rig.lanes.run() == 1  # type: ignore[attr-defined] # the setup; the first delivery will be held
    for _ in range(5):
        rig.clock.advance(1.0)  # type: ignore[attr-defined]
        rig.settle(lanes=False)  # the delivery is held
    assert len(journal.deliveries) == 0
    assert rig.kinesis.polls == 1 + 2  # the batch in hand, and two fetched ahead
    for _ in range(20):
        rig.clock.advance(1.0)  # type: ignore[attr-defined]
        rig.settle()
    assert journal.sequences() == sorted(journal.sequences()) and len(journal.deliveries) == 10


def test_shards_take_their_turns_in_one_pool_and_each_delivers_in_order() -> None:
    journal = Journal()
    rig = Rig(4, _recording(journal))
    for shard in rig.shards:
        for i in range(3):
            rig.kinesis.put("s", shard, f"{shard}-{i}".encode())
    rig.add()
    rig.runner.run_once()
    assert len(rig.lanes.jobs) == 4  # type: ignore[attr-defined] # four setups, one per shard
    rig.settle()
    for shard in rig.shards:
        assert len(journal.sequences(shard)) == 3
        assert journal.sequences(shard) == sorted(journal.sequences(shard))


def test_a_requested_stop_of_every_shard_drains_them_all_at_once() -> None:
    """Stops are not one after another: every shard's shutdown_requested is handed out in one step."""
    journal = Journal()
    rig = Rig(16, _recording(journal))
    for shard in rig.shards:
        rig.kinesis.put("s", shard, b"x")
    rig.add()
    rig.settle()
    for consumer in rig.consumers:  # each waits on its next poll's pacing slot: the poll is let finish
        consumer.stop(ShutdownReason.REQUESTED)
    rig.clock.advance(IDLE)  # type: ignore[attr-defined]
    rig.runner.run_once()
    assert len(rig.fetches.jobs) == 16  # type: ignore[attr-defined]
    rig.fetches.run()  # type: ignore[attr-defined]
    rig.runner.run_once()
    assert len(rig.lanes.jobs) == 16  # type: ignore[attr-defined] # every shutdown_requested at once
    rig.settle()
    assert rig.outcomes() == [Outcome.STOPPED] * 16
    assert rig.runner.shards == 0
    assert all(c.finished for c in rig.consumers)
    for shard in rig.shards:  # each drained with its final checkpoint
        assert rig.tables.checkpoints[("s", shard)].position is not None


def test_a_poll_under_way_at_a_requested_stop_is_given_up_after_its_grace_on_made_up_time() -> None:
    journal = Journal()
    rig = Rig(1, _recording(journal))
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.add()
    rig.settle()
    rig.clock.advance(IDLE)  # type: ignore[attr-defined]
    rig.settle(fetch=False)  # the next poll is handed to the fetch pool, and hangs there
    assert len(rig.fetches.jobs) == 1  # type: ignore[attr-defined]
    rig.consumers[0].stop(ShutdownReason.REQUESTED)
    rig.settle(fetch=False)
    assert rig.outcomes() == []  # a poll under way is let finish...
    rig.clock.advance(IDLE + 0.49)  # type: ignore[attr-defined]
    rig.settle(fetch=False)
    assert rig.outcomes() == []
    rig.clock.advance(0.02)  # type: ignore[attr-defined]
    rig.settle(fetch=False)  # ...for one pacing interval and a grace, then the shard drains without it
    assert rig.outcomes() == [Outcome.STOPPED]
    assert rig.kinesis.polls == 1


def test_a_lost_lease_ends_the_shard_without_waiting_for_its_poll() -> None:
    journal = Journal()
    rig = Rig(1, _recording(journal))
    rig.add()
    rig.settle(fetch=False)
    assert len(rig.fetches.jobs) == 1  # type: ignore[attr-defined]
    rig.consumers[0].stop(ShutdownReason.LEASE_LOST)
    rig.settle(fetch=False)
    assert rig.outcomes() == [Outcome.LOST]
    assert ("w1", rig.shards[0], "lease_lost") in journal.events


class CountingProcessor(BaseProcessor):
    """Notes how many calls of its shard run at once, and can be held on its first batch."""

    def __init__(self, journal: Journal, gate: threading.Event | None, calls: dict[str, int]) -> None:
        self.journal, self.gate, self.calls = journal, gate, calls
        self.lock = threading.Lock()

    def process_records(self, data: ProcessRecordsInput) -> None:
        shard = data.records[0].shard_id
        with self.journal.lock:
            self.calls[shard] = self.calls.get(shard, 0) + 1
            at_once = self.calls[shard]
        if self.gate is not None:
            self.gate.wait(10)
        with self.journal.lock:
            self.calls[shard] -= 1
            assert at_once == 1, f"two calls of {shard} at once"
            self.journal.deliveries.extend(("w1", r.shard_id, r.sequence_number, 0, 1) for r in data.records)


def test_on_real_threads_each_shard_has_one_processor_call_at_a_time_in_order() -> None:
    journal, calls = Journal(), dict[str, int]()
    lanes, fetches = GrowingPool("lanes", 3), GrowingPool("fetches", 2)
    retrieval = RetrievalConfig(idle_time_between_reads=0.0, max_records=3, reads_per_second=1000)
    rig = Rig(
        6,
        lambda: CountingProcessor(journal, None, calls),
        retrieval=retrieval,
        clock=SystemClock(),
        fetches=fetches,
        lanes=lanes,
    )
    for shard in rig.shards:
        for i in range(20):
            rig.kinesis.put("s", shard, f"{i}".encode())
    rig.add()
    try:
        wait_until(lambda: len(journal.deliveries) == 120, what="every record delivered")
        for shard in rig.shards:
            assert journal.sequences(shard) == sorted(journal.sequences(shard))
            assert len(set(journal.sequences(shard))) == 20
        assert lanes.threads <= 3 and fetches.threads <= 2
    finally:
        rig.runner.close()


def test_on_real_threads_a_blocked_processor_holds_no_other_shard() -> None:
    journal, calls, gate = Journal(), dict[str, int](), threading.Event()
    retrieval = RetrievalConfig(idle_time_between_reads=0.0, max_records=5, reads_per_second=1000)
    blocked: list[str] = []

    def processor() -> CountingProcessor:
        first = not blocked
        p = CountingProcessor(journal, gate if first else None, calls)
        blocked.append("x")
        return p

    lanes = GrowingPool("lanes", 2)
    rig = Rig(
        3, processor, retrieval=retrieval, clock=SystemClock(), fetches=GrowingPool("f", 1), lanes=lanes
    )
    for shard in rig.shards:
        for i in range(10):
            rig.kinesis.put("s", shard, f"{i}".encode())
    rig.add()
    try:
        # One shard's processor never returns (until the gate opens): the other two deliver everything on
        # the one lane thread left.
        wait_until(lambda: len(journal.deliveries) == 20, what="the other shards delivered")
        assert sorted({d[1] for d in journal.deliveries}) != sorted(rig.shards)
        gate.set()
        wait_until(lambda: len(journal.deliveries) == 30, what="the held shard delivered once released")
    finally:
        gate.set()
        rig.runner.close()


class KeepingProcessor(BaseProcessor):
    """Manual mode: keeps every record it is given; the test marks them done."""

    checkpoint_mode = "manual"

    def __init__(self, kept: list[Record]) -> None:
        self.kept = kept

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.kept.extend(data.records)


def test_records_marked_done_wake_a_draining_shard_at_once_without_a_poll() -> None:
    kept: list[Record] = []
    rig = Rig(1, lambda: KeepingProcessor(kept))
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.add()
    rig.settle()
    consumer = rig.consumers[0]
    assert len(kept) == 1 and consumer.machine.state.pending == 1
    consumer.stop(ShutdownReason.REQUESTED)
    rig.clock.advance(IDLE)  # type: ignore[attr-defined] # the poll under way (its pacing slot) is let finish
    rig.settle()
    assert consumer.machine.state.stage.value == "wait_done"  # waits for the record, time standing still
    assert rig.outcomes() == []
    kept[0].done()  # from the processor's own thread: it wakes the runner, no clock needed
    rig.settle()
    assert rig.outcomes() == [Outcome.STOPPED]
    assert rig.tables.checkpoints[("s", rig.shards[0])].position == kept[0].position


class TimedProcessor(BaseProcessor):
    """Arms a timer at start; notes when it fires and when batches come."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def initialize(self, data: InitializationInput) -> None:
        assert data.timers is not None
        data.timers.call_later(1.0, lambda: self.seen.append("timer"))

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.seen.append("batch")


def test_a_processor_timer_runs_on_its_lane_never_beside_a_delivery() -> None:
    seen: list[str] = []
    rig = Rig(1, lambda: TimedProcessor(seen))
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.add()
    rig.runner.run_once()
    rig.lanes.run()  # type: ignore[attr-defined] # the setup: the timer is armed for T+1
    rig.settle(lanes=False)  # the first batch is fetched; its delivery waits on the lane
    assert len(rig.lanes.jobs) == 1  # type: ignore[attr-defined]
    rig.clock.advance(1.5)  # type: ignore[attr-defined]
    rig.runner.run_once()  # the timer is due, but the shard's lane is busy: it waits its turn
    assert len(rig.lanes.jobs) == 1 and seen == []  # type: ignore[attr-defined]
    rig.lanes.run()  # type: ignore[attr-defined]
    rig.runner.run_once()
    assert seen == ["batch"] and len(rig.lanes.jobs) == 1  # type: ignore[attr-defined] # now the timer
    rig.settle()
    assert seen == ["batch", "timer"]


def test_a_later_ownership_of_the_same_lease_is_a_shard_of_its_own() -> None:
    """The old consumer of a lease may still be ending when the next one of the same lease starts."""
    journal = Journal()
    rig = Rig(1, _recording(journal))
    rig.add()
    rig.settle()
    old = rig.consumers[0]
    new = ShardConsumer(old.lease, old.work._spec, old._ctx)
    new.start()
    old.stop(ShutdownReason.LEASE_LOST)
    rig.settle()
    assert rig.outcomes() == [Outcome.LOST] and old.finished
    assert not new.finished and rig.runner.shards == 1
    assert ("w1", rig.shards[0], "lease_lost") in journal.events


class FailingKinesis(CountingKinesis):
    """Its ``fail_on``-th GetRecords fails transiently."""

    fail_on = 2

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        if self.polls + 1 == self.fail_on:
            self.polls += 1
            raise TransientError("call 2 failed")
        return super().get_records(iterator, limit)


def test_a_failed_fetch_ahead_reaches_the_machine_and_nothing_is_fetched_until_its_backoff_ends() -> None:
    journal = Journal()
    retrieval = RetrievalConfig(idle_time_between_reads=0.0, max_records=1, reads_per_second=1000)
    kinesis = FailingKinesis()
    rig = Rig(1, _recording(journal), retrieval=retrieval, kinesis=kinesis)
    for i in range(3):
        kinesis.put("s", rig.shards[0], f"r{i}".encode())
    rig.add()
    for _ in range(3):
        rig.clock.advance(0.01)  # type: ignore[attr-defined]
        rig.settle()
    # The first batch delivered; the second call (fetched ahead) failed and reached the machine, which backs
    # off (0.1 to 0.2 s): no call behind its back meanwhile.
    assert kinesis.polls == 2 and len(journal.deliveries) == 1
    assert rig.consumers[0].machine.state.failures == 1
    rig.clock.advance(0.25)  # type: ignore[attr-defined]
    rig.settle()
    assert kinesis.polls >= 3 and journal.sequences()[:2] == sorted(journal.sequences())[:2]


def test_a_stop_drops_what_was_fetched_ahead() -> None:
    journal = Journal()
    retrieval = RetrievalConfig(
        idle_time_between_reads=0.0, max_records=1, reads_per_second=1000, prefetch_batches=2
    )
    rig = Rig(1, _recording(journal), retrieval=retrieval)
    for i in range(5):
        rig.kinesis.put("s", rig.shards[0], f"r{i}".encode())
    rig.add()
    rig.runner.run_once()
    rig.lanes.run()  # type: ignore[attr-defined] # the setup
    for _ in range(4):
        rig.clock.advance(0.01)  # type: ignore[attr-defined]
        rig.settle(lanes=False)  # the first delivery held; two batches fetched ahead
    assert rig.kinesis.polls == 3
    rig.consumers[0].stop(ShutdownReason.REQUESTED)
    rig.settle()
    assert rig.outcomes() == [Outcome.STOPPED]
    assert len(journal.deliveries) == 1  # the batch in hand only: nothing fetched ahead after a stop
    stored = rig.tables.checkpoints[("s", rig.shards[0])].position
    assert stored is not None and stored.sequence == journal.sequences()[0]


def test_nothing_is_fetched_after_the_shard_end() -> None:
    journal = Journal()
    retrieval = RetrievalConfig(
        idle_time_between_reads=0.0, max_records=10, reads_per_second=1000, prefetch_batches=3
    )
    rig = Rig(1, _recording(journal), retrieval=retrieval)
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.kinesis.split("s", rig.shards[0])  # the shard is closed: its end follows its one record
    rig.add()
    for _ in range(10):
        rig.clock.advance(0.01)  # type: ignore[attr-defined]
        rig.settle()
    assert rig.outcomes() == [Outcome.SHARD_END]
    assert rig.kinesis.polls <= 2  # the record and the end (perhaps in one call), and nothing after it
    assert ("w1", rig.shards[0], "shard_ended") in journal.events


def test_a_bug_of_ours_ends_its_shard_failed_and_the_others_go_on() -> None:
    journal = Journal()
    rig = Rig(2, _recording(journal))
    for shard in rig.shards:
        rig.kinesis.put("s", shard, b"a")
    broken = rig.consumers[0]

    def news() -> list[ShardEvent]:
        raise RuntimeError("a bug")

    broken.news = news  # type: ignore[method-assign]
    rig.add()
    rig.settle()
    assert rig.outcomes() == [Outcome.FAILED] and broken.finished
    assert journal.sequences(rig.shards[1]) and not rig.consumers[1].finished


def test_a_stop_whose_message_has_not_reached_the_runner_yet_is_seen_by_the_next_step() -> None:
    """``stop()`` marks the shard stopping at once (its next fetch is answered with nothing) and then posts
    its message: a step in between sees the stop too, instead of fetching nothing again and again."""
    journal = Journal()
    rig = Rig(1, _recording(journal))
    rig.kinesis.put("s", rig.shards[0], b"a")
    rig.add()
    rig.settle()
    consumer = rig.consumers[0]
    consumer.work.stopping(ShutdownReason.REQUESTED, cut=False)  # the first half of stop()
    for _ in range(3):
        rig.clock.advance(IDLE)  # type: ignore[attr-defined]
        rig.settle()
    assert rig.outcomes() == [Outcome.STOPPED]
