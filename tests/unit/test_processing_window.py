"""Processing time counts against the ownership window: no batch starts without the time the recent ones
took, the processor is told its deadline, and a batch during which the window closed is reported and its
checkpoint refused (the next owner delivers it again)."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

from consumer.clock import FakeClock
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import Lease
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.shard_decide import decide
from consumer.lifecycle.shard_messages import Deliver
from consumer.lifecycle.shard_model import Phase, Stage
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import FAST_LEASES, Journal, make_worker, start, wait_until
from .test_fencing import Partition

SHARD = "shardId-000000000000"


def _starts(consumer: ShardConsumer, clock: FakeClock, took: tuple[float, ...]) -> bool:
    """Whether the consumer's machine starts a batch in hand now, the recent processor calls having taken
    ``took``, with the window its guard reads on ``clock``."""
    now = clock.monotonic()
    state = replace(
        consumer.machine.state,
        phase=Phase.READING,
        stage=Stage.DELIVER,
        held=1,
        took=took,
        window_ends=now + consumer.guard.remaining(),
    )
    _, actions = decide(state, now, consumer.machine.rules)
    return Deliver() in actions


def test_a_batch_starts_only_with_the_recent_batches_time_left_in_the_window() -> None:
    clock = FakeClock()
    worker = make_worker("a", InMemoryTables(), InMemoryKinesis(), Journal(), clock=clock)
    consumer = ShardConsumer(Lease("s", SHARD, owner="a", epoch=1), worker.config.stream("s"), worker._ctx)
    window = FAST_LEASES.lease_duration - FAST_LEASES.safety_margin  # 0.7 s
    worker.validity.extend(clock.monotonic())
    assert _starts(consumer, clock, ())  # no batch timed yet: an open window is enough
    took = (0.1, 0.3, 0.2)  # the slowest recent batch: 0.3 s
    clock.advance(window - 0.31)
    assert _starts(consumer, clock, took)
    clock.advance(0.02)  # 0.29 s left: not enough for 0.3 s
    assert not _starts(consumer, clock, took)
    worker.validity.extend(clock.monotonic())  # the next heartbeat renews the window
    assert _starts(consumer, clock, took)
    # A processor slower than half the window still runs: right after a renewal, never starved.
    took = (*took, 5.0)
    assert _starts(consumer, clock, took)
    clock.advance(window / 2 + 0.01)
    assert not _starts(consumer, clock, took)


class Stuck(BaseProcessor):
    """Records every batch with its deadline; the first batch of worker ``a`` waits for ``release``."""

    def __init__(
        self,
        me: str,
        seen: list[tuple[str, bytes, float, int]],
        entered: threading.Event,
        release: threading.Event,
    ) -> None:
        self.me, self.seen, self.entered, self.release = me, seen, entered, release

    def process_records(self, data: ProcessRecordsInput) -> None:
        if self.me == "a" and not self.entered.is_set():
            self.entered.set()
            self.release.wait(10)
        self.seen.extend((self.me, r.data, data.deadline, data.epoch) for r in data.records)


def test_a_batch_the_window_closed_under_is_reported_and_its_checkpoint_refused() -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    seen: list[tuple[str, bytes, float, int]] = []
    entered, release = threading.Event(), threading.Event()
    partitions: list[Partition] = []
    a = make_worker(
        "a",
        tables,
        kinesis,
        Journal(),
        wrap_repo=lambda r: partitions.append(Partition(r)) or partitions[-1],
        processor=lambda: Stuck("a", seen, entered, release),
    )
    ta = start(a)
    wait_until(
        lambda: tables.leases.get(("s", SHARD)) is not None and tables.leases[("s", SHARD)].owner == "a"
    )
    b = make_worker("b", tables, kinesis, Journal(), processor=lambda: Stuck("b", seen, entered, release))
    tb = start(b)
    kinesis.put("s", SHARD, b"slow")
    assert entered.wait(5)
    partitions[0].cut.set()  # a's heartbeats fail while its batch runs
    wait_until(lambda: tables.leases[("s", SHARD)].owner == "b", what="b takes the lease from a")
    wait_until(lambda: [s[:2] for s in seen] == [("b", b"slow")], what="b delivers the batch again")
    release.set()  # a's batch ends long after its window closed
    wait_until(lambda: a.metrics.total("BatchesOverran") == 1, what="the overrun reported")  # type: ignore[attr-defined]
    partitions[0].cut.clear()
    wait_until(lambda: not a.owned, what="a learns it lost the lease")
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(5)
    epoch_b = tables.leases[("s", SHARD)].epoch
    assert tables.checkpoints[("s", SHARD)].epoch == epoch_b  # a's late checkpoint never landed
    mine = [s for s in seen if s[0] == "a"]
    assert mine and all(math.isfinite(d) for _, _, d, _ in seen)  # every batch was told its deadline
