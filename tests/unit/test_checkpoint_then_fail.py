"""A checkpoint at or behind what this ownership last saved is saved already: the writer sends nothing (the store
would refuse it as going backwards), the shard's machine never asks for one, and a retry of
``process_records`` never hands again a record the processor checkpointed before it failed. An explicit
position from before the batch in hand is still refused at once, as the KCL's range check does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer import Position, Record
from consumer.checkpoint.checkpointer import CheckpointWriter
from consumer.checkpoint.store import CheckpointItem
from consumer.config import ProcessingConfig
from consumer.errors import CheckpointRejectedError, LeaseLostError
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_messages import (
    Checkpoint,
    CheckpointWritten,
    Delivered,
    DeliveryHalted,
    Fetch,
    Fetched,
    Finish,
    NotifyShutdown,
    ShutdownNotified,
    StopRequested,
    WatermarkAdvanced,
    WriterChanged,
)
from consumer.lifecycle.shard_model import Mode
from consumer.metrics.sink import InMemoryMetrics
from consumer.sinks.dlq import InMemoryDeadLetterQueue
from tests.unit.test_library_checkpointer import Guard
from tests.unit.test_shard_machine import Shell, p

SHARD = "shardId-000000000001"


class Store:
    """Refuses a position behind the stored one, as DynamoDB's condition does."""

    def __init__(self) -> None:
        self.saved: list[Position] = []

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        return None

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        if self.saved and position < self.saved[-1]:
            raise CheckpointRejectedError(
                f"{position} is behind the stored {self.saved[-1]}", stale_epoch=False
            )
        self.saved.append(position)


def record(n: int) -> Record:
    return Record("orders", SHARD, str(n), 0, "pk", str(n).encode(), datetime.now(UTC))


def writer(store: Store, start: Position | None = None) -> CheckpointWriter:
    return CheckpointWriter(store, "orders", SHARD, Guard(), start, lambda: None)


# -- the writer and the processor's checkpointer -------------------------------------------------------------
def test_a_write_at_or_behind_the_last_checkpoint_sends_nothing() -> None:
    store = Store()
    w = writer(store, p(100))
    w.write(p(100))
    w.write(p(50))  # behind the start: the store would refuse it
    assert store.saved == []
    w.write(p(200))
    w.write(p(150))  # the shard's own write, behind the processor's checkpoint(record) since
    w.write(Position("200", 0))
    assert store.saved == [p(200)]
    assert w.last == p(200)


def test_a_no_argument_checkpoint_behind_a_checkpoint_of_a_record_in_the_same_call_is_a_no_op() -> None:
    store, default = Store(), [p(100)]  # auto: what the batches before delivered
    w = writer(store, p(100))
    w.hand(p(110))
    view = w.view(lambda: default[0])
    view.checkpoint(record(110))
    view.checkpoint(record(110))
    view.checkpoint()  # its default (100) lags the record checkpointed: saved already, no refusal
    assert store.saved == [p(110)]
    assert view.last_checkpoint == p(110)


def test_a_record_a_retry_hands_again_is_saved_already_but_one_before_the_batch_is_refused_at_once() -> None:
    store, default = Store(), [p(100)]
    w = writer(store, p(100))
    w.hand(p(110))
    view = w.view(lambda: default[0])
    for n in (101, 102, 103):
        view.checkpoint(record(n))
    for n in (101, 102):  # the batch's retry: the records checkpointed before are handed again
        view.checkpoint(record(n))
        view.checkpoint(p(n))
        asyncio.run(view.acheckpoint(record(n)))
    assert store.saved == [p(101), p(102), p(103)]
    default[0] = p(110)  # the batch is delivered: a position of it (or before) is no redelivery
    view.checkpoint(record(110))
    for stale in (record(103), p(100), p(7)):
        with pytest.raises(
            CheckpointRejectedError, match=r"behind this ownership's last checkpoint \(110/0\)"
        ):
            view.checkpoint(stale)
        with pytest.raises(CheckpointRejectedError) as caught:
            asyncio.run(view.acheckpoint(stale))
        assert not caught.value.stale_epoch
    assert store.saved == [p(101), p(102), p(103), p(110)]


# -- delivery ------------------------------------------------------------------------------------------
class PerRecord:
    """``handle(r); checkpoint(r)`` for each record; ``fails`` says how many times each record fails first."""

    def __init__(self, w: CheckpointWriter, fails: dict[int, int]) -> None:
        self.writer, self.fails = w, fails
        self.calls: list[list[int]] = []

    def __call__(self, records: Sequence[Record]) -> None:
        self.calls.append([int(r.sequence_number) for r in records])
        self.writer.hand(records[-1].position)
        view = self.writer.view(lambda: None)
        for r in records:
            n = int(r.sequence_number)
            if self.fails.get(n, 0):
                self.fails[n] -= 1
                raise ValueError(f"record {n}")
            view.checkpoint(r)


def _deliver(process: PerRecord, records: list[Record], **processing: Any) -> Any:
    cfg = ProcessingConfig(max_attempts=3, backoff_base=0.001, backoff_max=0.001, **processing)
    dlq = InMemoryDeadLetterQueue()
    w = process.writer
    result = deliver(records, process, cfg, dlq, 4, threading.Event(), InMemoryMetrics(), lambda: w.last)
    return result, dlq


def test_a_transient_failure_is_retried_from_the_record_that_failed() -> None:
    store = Store()
    process = PerRecord(writer(store, p(0)), {57: 2})
    result, dlq = _deliver(process, [record(n) for n in range(1, 100)])
    assert result.outcome is DeliveryOutcome.DONE
    assert process.calls == [list(range(1, 100)), list(range(57, 100)), list(range(57, 100))]
    assert store.saved == [p(n) for n in range(1, 100)]
    assert dlq.messages == []


def test_only_the_record_that_fails_every_attempt_is_dead_lettered() -> None:
    store = Store()
    process = PerRecord(writer(store, p(0)), {5: 99})
    result, dlq = _deliver(process, [record(n) for n in range(1, 10)], on_failure="dlq", dlq_url="q")
    assert result.outcome is DeliveryOutcome.DONE
    assert [r.sequence_number for r in result.dead_lettered] == ["5"]
    assert [m["sequence_number"] for m in dlq.messages] == ["5"]
    # the batch thrice from where it failed, then each record not checkpointed alone: 5 thrice, then the rest
    assert process.calls == [
        list(range(1, 10)),
        [5, 6, 7, 8, 9],
        [5, 6, 7, 8, 9],
        [5],
        [5],
        [5],
        [6],
        [7],
        [8],
        [9],
    ]


def test_the_shard_halts_on_the_record_that_fails_every_attempt() -> None:
    store = Store()
    process = PerRecord(writer(store, p(0)), {5: 99})
    result, _ = _deliver(process, [record(n) for n in range(1, 10)])
    assert result.outcome is DeliveryOutcome.HALT
    assert result.failed_record is not None and result.failed_record.sequence_number == "5"
    assert store.saved == [p(1), p(2), p(3), p(4)]


def test_a_batch_checkpointed_to_its_end_before_it_failed_is_done() -> None:
    records = [record(n) for n in range(1, 4)]
    w = writer(Store(), p(0))
    calls: list[int] = []

    def process(batch: Sequence[Record]) -> None:
        calls.append(len(batch))
        w.hand(batch[-1].position)
        w.view(lambda: None).checkpoint(batch[-1])
        raise ValueError("after the checkpoint")

    cfg = ProcessingConfig(max_attempts=3, backoff_base=0.001, backoff_max=0.001)
    result = deliver(records, process, cfg, None, 4, threading.Event(), InMemoryMetrics(), lambda: w.last)
    assert result.outcome is DeliveryOutcome.DONE
    assert calls == [3]  # the processor said all of it is done: nothing handed again


# -- the shard's machine ----------------------------------------------------------------------------------
def test_a_halt_behind_the_processors_own_checkpoint_writes_nothing_and_stays_halted() -> None:
    """The halt's checkpoint (the record before the failing one) behind what the processor checkpointed
    itself: nothing to write, and the shard ends HALTED (not FAILED on a refusal of its own write)."""
    shell = Shell(start=p(0))
    shell(Fetched(5, p(5)))
    assert shell(WriterChanged(p(3), None), DeliveryHalted(at=p(2), before=p(1))) == [
        Finish(Outcome.HALTED, p(2))
    ]


def test_the_machine_never_asks_for_a_checkpoint_behind_the_written_one() -> None:
    auto = Shell(start=p(0))
    auto(Fetched(5, p(5)))
    assert auto(WriterChanged(p(9), None), Delivered()) == [Fetch()]  # delivered 5, written 9 already
    auto(Fetched(3, p(12)))
    assert auto(Delivered()) == [Checkpoint(p(12))]
    # the processor checkpointed further meanwhile (from a thread of its own): the write asked for was skipped
    assert auto(WriterChanged(p(14), None), CheckpointWritten(p(12))) == [Fetch()]
    assert auto.m.state.written == p(14)  # never moved back
    manual = Shell(Mode.MANUAL, start=p(0))
    manual(Fetched(5, p(5)))
    manual(WriterChanged(p(5), None), Delivered())  # the processor checkpointed the batch's last record
    assert manual(WatermarkAdvanced(p(2), 3), Fetched(0)) == [Fetch()]  # what is done lags: nothing to write
    assert manual(StopRequested(ShutdownReason.REQUESTED), Fetched(0)) == [NotifyShutdown()]
    assert manual(ShutdownNotified(), WatermarkAdvanced(p(4), 0)) == [
        Finish(Outcome.STOPPED, None)
    ]  # the drain's final checkpoint (4) is behind the written one (5): drained


def test_the_halt_checkpoint_ahead_of_the_written_one_is_still_written() -> None:
    shell = Shell(start=p(0))
    shell(Fetched(5, p(5)))
    assert shell(WriterChanged(p(1), None), DeliveryHalted(at=p(3), before=p(2))) == [Checkpoint(p(2))]


def test_a_stale_position_after_the_ownership_ended_is_told_as_the_lost_lease() -> None:
    class Lost(Guard):
        def ensure_valid(self) -> None:
            raise LeaseLostError("orders/shardId-000000000001: this ownership has ended")

    w = CheckpointWriter(Store(), "orders", SHARD, Lost(), p(110), lambda: None)
    with pytest.raises(LeaseLostError):  # not CheckpointRejectedError: the shard moved on
        w.view(lambda: p(110)).checkpoint(record(103))
