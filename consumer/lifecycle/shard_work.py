"""The hands of one shard consumer: each action of ``ShardMachine`` carried out, its result an event.

``ShardWork`` owns what the actions touch (the reader, the batch in hand, the processor and its checkpoint
policy and writer); ``ShardRunner`` calls them on its pools, ``ShardConsumer`` takes the coordinator's calls. Every failure becomes
an event here, decided by ``retry.verdict``; only a bug of ours escapes (the loop's boundary ends it FAILED).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import assert_never

from consumer.checkpoint.checkpointer import ShardCheckpointer
from consumer.checkpoint.policy import AnyPolicy, AutoCheckpoints, ExplicitCheckpoints, ManualCheckpoints
from consumer.config import StreamSpec
from consumer.errors import LeaseLostError, ProcessorSetupError
from consumer.leases.model import Lease
from consumer.lifecycle import retry
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.processor import (
    ProcessRecordsInput,
    ShutdownReason,
    Timers,
)
from consumer.lifecycle.shard_callbacks import ShardCallbacks
from consumer.lifecycle.shard_failures import judge
from consumer.lifecycle.shard_messages import (
    CheckpointFailed,
    CheckpointWritten,
    Delivered,
    DeliveryHalted,
    DeliveryInterrupted,
    Fetched,
    FetchFailed,
    NotStarted,
    SetupFailed,
    ShardEvent,
    Started,
)
from consumer.lifecycle.shard_model import Mode
from consumer.lifecycle.shard_start import ConsumerContext, open_reader, start_shard
from consumer.lifecycle.shard_start import Started as Setting
from consumer.lifecycle.slow_calls import ProcessorCall, watching_calls
from consumer.records import Position, Record
from consumer.retrieval.reader import Fetch, ShardReader

__all__ = ["ShardWork"]

logger = logging.getLogger(__name__)


class ShardWork(ShardCallbacks):
    """What one shard consumer's actions act on, and the actions themselves (called one at a time by the
    runner, on its scheduler or its pools; ``stopping`` from the coordinator's thread)."""

    def __init__(
        self,
        lease: Lease,
        spec: StreamSpec,
        ctx: ConsumerContext,
        guard: ShardGuard,
        wake: Callable[[], None] = lambda: None,
        timers: Timers | None = None,
    ) -> None:
        """``wake``: steps the shard's machine soon (records marked done, a checkpoint written); ``timers``:
        the processor's own, on the shard's lane."""
        self._wake = wake
        self._timers = timers
        self.lease = lease
        self._spec = spec
        self._ctx = ctx
        self.guard = guard
        self.signal = threading.Event()  # set by a stop: ends the processor's retry waits
        self.reason: ShutdownReason | None = None
        self.reader: ShardReader | None = None
        self._taken: Position | None = None  # the last record taken from a reader (or the start position)
        self._initial = "TRIM_HORIZON"
        self.setting: Setting | None = None
        self._view: ShardCheckpointer | None = None
        self._batch: Sequence[Record] = ()
        self.behind: int | None = None  # the MillisBehindLatest of the fetch of this round
        self.calling: ProcessorCall | None = (
            None  # a processor callback under way (the worker's SlowCallWatch)
        )
        self._lock = threading.Lock()  # orders a stop against the loop entering or leaving a fetch
        self._fetching = False  # the machine waits on a fetch (a requested stop lets it finish)
        self._setup_told = False  # a processor setup failure's traceback was logged

    # -- from the coordinator's thread -----------------------------------------------------------------
    def stopping(self, reason: ShutdownReason, cut: bool) -> tuple[ShardReader | None, bool]:
        """Note the stop; the reader to interrupt, and whether a fetch under way is let finish first (never
        with ``cut``: fan-out, whose subscription waits for its next event, or a release to nobody)."""
        with self._lock:
            self.reason = current = _stronger(self.reason, reason)
            self.signal.set()
            match current:
                case ShutdownReason.REQUESTED:  # drains: the poll the machine waits on may finish
                    finishing = self._fetching and not cut
                case ShutdownReason.LEASE_LOST:  # stops at once
                    finishing = False
                case _:
                    assert_never(current)
            return self.reader, finishing

    def interrupt_fetch(self, reader: ShardReader) -> None:
        """A requested stop's grace is over: a fetch still under way is cut off."""
        with self._lock:
            late = self._fetching
        if late:
            self.log("final_fetch_interrupted", logging.WARNING)
            reader.interrupt()

    # -- the actions, one at a time ---------------------------------------------------------------
    def close_reader(self) -> None:
        """Hold nothing (e.g. the one fan-out subscription the next owner needs); reopened after the last
        record taken when a fetch comes again."""
        if self.reader is not None:
            self.reader.interrupt()
            self.reader.close()
            self.reader = None

    def _decided(self, exc: Exception) -> tuple[retry.Verdict, str]:
        """``retry.verdict`` of ``exc``, told as ``judge`` tells it (a setup failure's traceback once per
        ownership)."""
        first_setup = isinstance(exc, ProcessorSetupError) and not self._setup_told
        self._setup_told = self._setup_told or first_setup
        return judge(exc, self.lease, self._ctx.metrics, tell_setup=first_setup)

    def setup(self) -> ShardEvent:
        """Read the checkpoint, build and initialize the processor (``shard_start.start_shard``)."""
        try:  # initialize is called inside start_shard, through the processor's adapter: watched there
            with watching_calls(self.watched):
                started = start_shard(self.lease, self._spec, self._ctx, self.guard, self._wake, self._timers)
        except LeaseLostError as exc:
            return self.closed(exc, False)
        except Exception as exc:  # the one verdict decides: retried, or FAILED
            return SetupFailed(*self._decided(exc))
        if isinstance(started, Outcome):
            return NotStarted(started)
        self.setting, self._view = started, started.writer.view(started.policy.position)
        self._taken, self._initial = started.start, started.initial
        return Started(started.start, _mode(started.policy))

    def begin_fetch(self) -> ShardEvent | None:
        """The machine asks for the next fetch: None when it may go ahead (on ``reader``, opened if need
        be), else the event that answers it at once. A requested stop that comes while the machine waits on
        it lets it finish (bounded by one pacing interval and one call); it never starts a new one."""
        try:
            self._open_reader()
        except LeaseLostError as exc:
            return self.closed(exc, False)
        except Exception as exc:  # the one verdict decides: retried, or FAILED
            return FetchFailed(*self._decided(exc))
        with self._lock:
            if self.reason is not None:
                return Fetched(0, nothing=True)
            self._fetching = True
        return None

    def fetched(self, item: Fetch | Exception | None) -> ShardEvent:
        """What the fetch the machine waited on brought (records, nothing yet, or a failure), as its event."""
        ctx, lease, setting = self._ctx, self.lease, self.setting
        assert setting is not None
        with self._lock:
            self._fetching = False
        if isinstance(item, LeaseLostError):
            return self.closed(item, False)
        if isinstance(item, Exception):  # the one verdict decides: retried, or FAILED
            return FetchFailed(*self._decided(item))
        if item is None:
            return Fetched(0, nothing=True)
        if item.records:
            self._taken = item.records[-1].position
        behind = self.behind = item.millis_behind_latest
        ctx.progress.read(lease, behind, self._taken)  # published with the heartbeat, for `status`
        if behind is not None:
            ctx.metrics.add("MillisBehindLatest", behind, lease.stream, lease.shard_id)
        batch = self._batch = setting.policy.track(item.records)  # an idle shard waits in the pacing
        return Fetched(len(batch), batch[-1].position if batch else None, item.shard_end)

    def _open_reader(self) -> ShardReader:
        """The reader, opened (again, after a suspension) after the last record taken."""
        if self.reader is None:
            self.reader = open_reader(self._ctx, self.lease, self._taken, self._initial)
            if self.reason is not None:  # a stop that came while there was no reader to interrupt
                self.reader.interrupt()
        return self.reader

    def deliver(self) -> ShardEvent:
        """Deliver the batch in hand (``delivery.deliver``: retries, then dead-letter or halt)."""
        ctx, lease, batch, setting, view = self._ctx, self.lease, self._batch, self.setting, self._view
        assert setting is not None and view is not None
        processor, behind, took = setting.processor, self.behind, []

        def call(records: Sequence[Record]) -> None:
            self.guard.ensure_valid()
            setting.writer.hand(records[-1].position)  # the furthest the processor may checkpoint now
            started, lapses = ctx.clock.monotonic(), self.guard.lapses
            deadline = started + self.guard.remaining()
            data = ProcessRecordsInput(records, view, lease.epoch, behind, self.guard, deadline)
            try:
                with self.watched("process_records"):
                    processor.process_records(data)
            finally:
                took.append(self._timed(started, deadline, lapses, len(records)))

        try:
            result = deliver(
                batch,
                call,
                ctx.config.processing,
                ctx.dlq,
                lease.epoch,
                self.signal,
                ctx.metrics,
                checkpointed=lambda: setting.writer.last,  # what the processor said is done is not redone
            )
        except LeaseLostError as exc:
            return self.closed(exc, False)
        if result.outcome is DeliveryOutcome.STOPPED:
            return DeliveryInterrupted(tuple(took))  # the batch stays unacknowledged: delivered again
        if result.outcome is DeliveryOutcome.HALT:
            failed = result.failed_record
            setting.policy.halted(batch, failed, result.dead_lettered)
            before = [r.position for r in batch if failed is not None and r.position < failed.position]
            if before:  # processed before the failing record (and checkpointed by the halt): counted too
                ctx.metrics.add("RecordsProcessed", len(before), lease.stream, lease.shard_id)
            at = failed.position if failed is not None else None
            return DeliveryHalted(at, before[-1] if before else None, tuple(took))
        setting.policy.delivered(batch, result.dead_lettered)
        ctx.metrics.add("RecordsProcessed", len(batch), lease.stream, lease.shard_id)
        self._batch, self.behind = (), None
        return Delivered(tuple(took))

    def _timed(self, started: float, deadline: float, lapses: int, records: int) -> float:
        """How long a processor call took; one during which our window closed is reported (its checkpoint,
        written with an epoch this worker could not prove, is refused as any late write)."""
        ended = self._ctx.clock.monotonic()
        if not self.guard.is_valid() or self.guard.lapses != lapses:
            lease = self.lease
            self.log(
                "batch_overran_window",
                logging.WARNING,
                took_s=round(ended - started, 3),
                over_s=round(max(0.0, ended - deadline), 3),
                records=records,
                hint="a processor call outlived this worker's proof of ownership: check data.guard before "
                "side effects, or write them with data.epoch",
            )
            self._ctx.metrics.add("BatchesOverran", 1, lease.stream, lease.shard_id)
        return ended - started

    def checkpoint(self, position: Position) -> ShardEvent:
        """Write ``position`` with the lease's epoch (a fenced write means the lease is lost)."""
        assert self.setting is not None
        try:
            self.setting.writer.write(position)
        except LeaseLostError as exc:
            return self.closed(exc, False)
        except Exception as exc:  # the one verdict decides: retried, or FAILED
            return CheckpointFailed(position, *self._decided(exc))
        return CheckpointWritten(position)


def _stronger(noted: ShutdownReason | None, reason: ShutdownReason) -> ShutdownReason:
    """The stop that holds after ``reason`` comes on top of ``noted``: a lost lease overrides a requested stop;
    a requested stop changes nothing once a stop is noted."""
    match reason:
        case ShutdownReason.LEASE_LOST:
            return reason
        case ShutdownReason.REQUESTED:
            return reason if noted is None else noted
        case _:
            assert_never(reason)


def _mode(policy: AnyPolicy) -> Mode:
    """The machine's mode for ``policy`` (a policy without one is a bug: never run as auto)."""
    match policy:
        case AutoCheckpoints():
            return Mode.AUTO
        case ManualCheckpoints():
            return Mode.MANUAL
        case ExplicitCheckpoints():
            return Mode.EXPLICIT
        case _:
            assert_never(policy)
