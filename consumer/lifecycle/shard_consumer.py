"""One shard's processing loop, on its own thread: fetch, deliver, checkpoint, and end in one known way.

The coordinator talks to it through one call, ``stop(reason)``; it answers once, with a ``ShardFinished``
event. A requested stop lets a poll already under way (its pacing wait and GetRecords) finish and delivers
what it brings before the final checkpoint: the records that reached the shard since the last poll go out
now, not one hand-off later, so the shard's silent window during a hand-off is the hand-off alone.
Failures that may pass (``retry.verdict``) are retried in place by one ``RetryPolicy``; past its bound the
loop ends ``GAVE_UP``, and on a bug or a refusal ``FAILED`` at once; either way the lease moves on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TypeVar

from consumer.checkpoint.checkpointer import CheckpointWriter, ShardCheckpointer
from consumer.checkpoint.policy import CheckpointPolicy
from consumer.config import StreamSpec
from consumer.errors import LeaseLostError, TransientError
from consumer.leases.model import Lease
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.messages import Outcome, ShardFinished
from consumer.lifecycle.processor import (
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownReason,
    ShutdownRequestedInput,
)
from consumer.lifecycle.retry import RetryPolicy, Verdict, operation, verdict
from consumer.lifecycle.shard_start import ConsumerContext, Started, open_reader, start_shard
from consumer.logs import log_event
from consumer.records import SHARD_END, Position, Record
from consumer.retrieval.reader import Fetch, ShardReader

__all__ = ["ConsumerContext", "ShardConsumer", "ShardGuard"]  # the first two re-exported for callers

logger = logging.getLogger(__name__)


_T = TypeVar("_T")

_FINAL_FETCH_GRACE = 0.5  # seconds a poll under way at a requested stop may take beyond its pacing wait
_PAUSED_RECHECK = 0.05  # seconds between looks at the pending count while fetching is paused
_RECENT_BATCHES = 5  # a batch is started only with the longest of the last few batches' time left
_WINDOW_RECHECK = 0.02  # seconds between looks at our window while a batch waits for room in it


class _Halted(Exception):
    def __init__(self, at: Position | None) -> None:
        self.at = at


class ShardConsumer:
    def __init__(self, lease: Lease, spec: StreamSpec, ctx: ConsumerContext) -> None:
        self.lease = lease
        self._spec = spec
        self._ctx = ctx
        self.guard = ShardGuard(lease.epoch, ctx.validity)
        self._signal = threading.Event()  # the one stop signal; wakes every wait in the loop
        self._reason: ShutdownReason | None = None
        self._reader: ShardReader | None = None
        self._taken: Position | None = None  # the last record taken from a reader (or the start position)
        self._initial = "TRIM_HORIZON"
        self._processor: RecordProcessor | None = None
        self._batch: Sequence[Record] = ()
        self._shard_end = False
        self._ended = False  # shard_ended was called
        self._halted_at: Position | None = None
        self._paused_at: float | None = None  # fetching paused: too many records delivered and not done
        self._took: deque[float] = deque(maxlen=_RECENT_BATCHES)  # how long the last batches took
        self._waiting_for_window = False
        self._lock = threading.Lock()  # orders stop() against the loop entering or leaving a fetch
        self._fetching = False  # the loop waits on a fetch (a requested stop lets it finish)
        self._thread = threading.Thread(target=self._main, name=f"shard-{lease.shard_id}", daemon=True)
        cfg = ctx.config
        self._retry = RetryPolicy(
            ctx.clock,
            cfg.retrieval.backoff_base,
            cfg.retrieval.backoff_max,
            cfg.lease.give_up_seconds,
            stream=lease.stream,
            shard=lease.shard_id,
        )

    # -- control, from the coordinator --------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, reason: ShutdownReason) -> None:
        """REQUESTED: drain (finish the batch in flight and a poll under way, final checkpoint); LEASE_LOST:
        stop at once."""
        if reason is ShutdownReason.LEASE_LOST:
            self.guard.mark_lost()
        with self._lock:
            if self._reason is None or reason is ShutdownReason.LEASE_LOST:
                self._reason = reason
            self._signal.set()
            reader = self._reader
            finishing = (
                self._reason is ShutdownReason.REQUESTED
                and self._fetching
                and self._ctx.config.retrieval.mode != "fanout"  # a subscription waits for its next event
            )
        if reader is None:
            return
        if not finishing:
            reader.interrupt()  # ends the pacing wait, drops what was fetched ahead
            return
        # A call that hangs (a slow network) must not hold the hand-off: past one pacing interval and a
        # grace, the fetch is interrupted as any other.
        grace = self._ctx.config.retrieval.idle_time_between_reads + _FINAL_FETCH_GRACE
        timer = threading.Timer(grace, self._interrupt_fetch, (reader,))
        timer.daemon = True
        timer.start()

    def _interrupt_fetch(self, reader: ShardReader) -> None:
        with self._lock:
            late = self._fetching
        if late:
            self._log("final_fetch_interrupted", logging.WARNING)
            reader.interrupt()

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` for the loop's thread to end."""
        self._thread.join(timeout)

    @property
    def finished(self) -> bool:
        """The loop has ended (it was started and its thread is gone)."""
        return self._thread.ident is not None and not self._thread.is_alive()

    # -- the thread ---------------------------------------------------------------------------------
    def _log(self, event: str, level: int = logging.INFO, **fields: object) -> None:
        lease = self.lease
        log_event(
            logger, event, level, stream=lease.stream, shard=lease.shard_id, epoch=lease.epoch, **fields
        )

    def _main(self) -> None:
        outcome, detail = Outcome.FAILED, ""
        try:
            outcome = self._run()
        except LeaseLostError as exc:
            self._log("lease_lost_in_loop", logging.WARNING, error=str(exc))
            outcome = self._lost()
        except Exception as exc:  # the shard thread's boundary: whatever ended it, the coordinator hears once
            logger.exception(
                "shard loop failed", extra={"event": "shard_failed", "shard": self.lease.shard_id}
            )
            detail = repr(exc)
        finally:
            self._log("shard_stopped", outcome=outcome.value)
            # Report first: the hand-off need not wait for a fetch still in flight (its result is dropped).
            self._ctx.report(
                ShardFinished(self.lease.key, self.lease.epoch, outcome, self._halted_at, detail)
            )
            if self._reader is not None:
                self._reader.interrupt()
                self._reader.close()

    def _setup(self) -> Started | Outcome:
        started = start_shard(self.lease, self._spec, self._ctx, self.guard)
        if isinstance(started, Started):
            self._processor = started.processor
            self._taken, self._initial = started.start, started.initial
        return started

    def _run(self) -> Outcome:
        setup: Started | Outcome = self._retrying(self._setup)
        if isinstance(setup, Outcome):
            return setup
        processor, writer, policy = setup.processor, setup.writer, setup.policy
        view = writer.view(policy.position)
        result = self._retrying(lambda: self._step(processor, writer, policy, view))
        if result is Outcome.STOPPED:
            return self._graceful(processor, writer, policy)
        if result is Outcome.LOST:
            policy.close()
        return result

    def _suspend(self) -> None:
        """Our heartbeat window is closed: hold nothing (e.g. the shard's one fan-out subscription, which
        whoever takes over needs) and wait until the coordinator renews it or declares the lease lost."""
        if self._reader is not None:  # reopened after the last record taken once the window opens again
            self._reader.interrupt()
            self._reader.close()
            self._reader = None
        self._retry.pause()
        self._signal.wait(0.05)

    def _stop_outcome(self) -> Outcome | None:
        if self._reason is ShutdownReason.LEASE_LOST or self.guard.lost.is_set():
            return self._lost()
        if self._reason is ShutdownReason.REQUESTED:
            return Outcome.STOPPED
        return None

    def _failed(self, exc: Exception) -> float | None:
        """The retry policy's answer to ``exc`` (a throttle counted per operation first); a bug or a refusal
        is raised again, for ``_main`` to end the loop FAILED with its traceback."""
        decided = verdict(exc)
        if decided is Verdict.SURFACE:
            raise exc
        if decided is Verdict.BACK_OFF:
            self._ctx.metrics.add(f"Throttles.{operation(exc)}", 1, self.lease.stream, self.lease.shard_id)
        return self._retry.failed(exc)

    def _retrying(self, step: Callable[[], _T | Outcome | None]) -> _T | Outcome:
        """Run ``step`` until it returns an outcome, retrying in place what ``verdict`` says may pass."""
        while True:
            if (stopped := self._stop_outcome()) is not None:
                return stopped
            if not self.guard.is_valid():
                self._suspend()
                continue
            try:
                result = step()
            except LeaseLostError:
                if self.guard.lost.is_set():
                    raise
                # Our heartbeat window closed mid-step, the lease is not known lost: suspend, then redo what
                # was not done. An interrupted batch is delivered again.
                continue
            except _Halted as halted:
                self._halted_at = halted.at
                return Outcome.HALTED
            except Exception as exc:  # the one verdict decides: retried here, or surfaced (FAILED)
                delay = self._failed(exc)
                if delay is None:
                    return Outcome.GAVE_UP
                self._signal.wait(delay)
                continue
            self._retry.succeeded()
            if result is not None:
                return result

    def _step(
        self,
        processor: RecordProcessor,
        writer: CheckpointWriter,
        policy: CheckpointPolicy,
        view: ShardCheckpointer,
    ) -> Outcome | None:
        """One round: fetch if nothing is in hand, deliver, checkpoint what is due; SHARD_END at the end."""
        ctx, lease = self._ctx, self.lease
        writer.flush_pending()
        behind: int | None = None
        if not self._batch and not self._shard_end:
            if self._backpressure(policy, writer):
                return None
            fetched = self._fetch()
            if fetched is None:
                return None
            if fetched.records:
                self._taken = fetched.records[-1].position
            self._shard_end = fetched.shard_end
            behind = fetched.millis_behind_latest
            ctx.progress.read(lease, behind, self._taken)  # published with the heartbeat, for `status`
            if behind is not None:
                ctx.metrics.add("MillisBehindLatest", behind, lease.stream, lease.shard_id)
            self._batch = policy.track(fetched.records)  # an idle shard waits in the reader's pacing
        if self._batch:
            self._deliver(processor, policy, view, behind, writer)
        policy.save_due(writer, idle=not self._batch)
        if self._shard_end and not self._batch:
            return self._end(processor, writer, policy)
        return None

    def _backpressure(self, policy: CheckpointPolicy, writer: CheckpointWriter) -> bool:
        """Manual mode: while ``checkpoint.max_pending_records`` delivered records are not done, fetch
        nothing (what is held stays bounded); checkpoint what gets done meanwhile. True while paused."""
        ctx, lease = self._ctx, self.lease
        cap, pending = ctx.config.checkpoint.max_pending_records, policy.pending
        ctx.metrics.add("PendingRecords", pending, lease.stream, lease.shard_id)
        if pending < cap:
            if self._paused_at is not None:
                paused = round(ctx.clock.monotonic() - self._paused_at, 3)
                self._log("fetching_resumed", pending=pending, paused_s=paused)
                self._paused_at = None
            return False
        if self._paused_at is None:
            self._paused_at = ctx.clock.monotonic()
            self._log("fetching_paused", logging.WARNING, pending=pending, max_pending_records=cap)
            ctx.metrics.add("FetchingPaused", 1, lease.stream, lease.shard_id)
        policy.save_due(writer, idle=True)
        self._signal.wait(_PAUSED_RECHECK)  # a stop ends the wait at once
        return True

    def _room_for_batch(self) -> bool:
        """Whether the window leaves the time the recent batches took (at most half the window, so a slow
        processor still starts right after a renewal); if not, wait a little for the next heartbeat."""
        needed = min(max(self._took, default=0.0), self.guard.window / 2)
        if self.guard.remaining() >= needed:
            if self._waiting_for_window:
                self._waiting_for_window = False
                self._log("batch_window_open", needed_s=round(needed, 3))
            return True
        if not self._waiting_for_window:
            self._waiting_for_window = True
            self._log(
                "batch_waits_for_window",
                needed_s=round(needed, 3),
                remaining_s=round(self.guard.remaining(), 3),
            )
        self._signal.wait(_WINDOW_RECHECK)
        return False

    def _timed(self, started: float, deadline: float, lapses: int, records: int) -> None:
        """Note how long a batch took; one during which our window closed is reported (its checkpoint,
        written with an epoch this worker could not prove, is refused as any late write)."""
        ended = self._ctx.clock.monotonic()
        self._took.append(ended - started)
        if not self.guard.is_valid() or self.guard.lapses != lapses:
            lease = self.lease
            self._log(
                "batch_overran_window",
                logging.WARNING,
                took_s=round(ended - started, 3),
                over_s=round(max(0.0, ended - deadline), 3),
                records=records,
                hint="a processor call outlived this worker's proof of ownership: check data.guard before "
                "side effects, or write them with data.epoch",
            )
            self._ctx.metrics.add("BatchesOverran", 1, lease.stream, lease.shard_id)

    def _fetch(self) -> Fetch | None:
        """The next fetch. A requested stop that comes while we wait on it lets it finish (bounded by one
        pacing interval and one call); it never starts a new one."""
        reader = self._open_reader()
        with self._lock:
            if self._reason is not None:
                return None
            self._fetching = True
        try:
            return reader.fetch()
        finally:
            with self._lock:
                self._fetching = False

    def _open_reader(self) -> ShardReader:
        """The reader, opened (again, after a suspension) after the last record taken."""
        if self._reader is None:
            self._reader = open_reader(self._ctx, self.lease, self._taken, self._initial)
            if self._reason is not None:  # a stop that came while there was no reader to interrupt
                self._reader.interrupt()
        return self._reader

    def _deliver(
        self,
        processor: RecordProcessor,
        policy: CheckpointPolicy,
        view: ShardCheckpointer,
        behind: int | None,
        writer: CheckpointWriter,
    ) -> None:
        ctx, lease, batch = self._ctx, self.lease, self._batch
        if not self._room_for_batch():
            return  # kept in hand: started once a heartbeat has renewed the window

        def call(records: Sequence[Record]) -> None:
            self.guard.ensure_valid()
            started, lapses = ctx.clock.monotonic(), self.guard.lapses
            deadline = started + self.guard.remaining()
            data = ProcessRecordsInput(records, view, lease.epoch, behind, self.guard, deadline)
            try:
                processor.process_records(data)
            finally:
                self._timed(started, deadline, lapses, len(records))

        result = deliver(batch, call, ctx.config.processing, ctx.dlq, lease.epoch, self._signal, ctx.metrics)
        if result.outcome is DeliveryOutcome.STOPPED:
            return  # interrupted: the batch stays unacknowledged, the next owner gets it again
        if result.outcome is DeliveryOutcome.HALT:
            failed = result.failed_record
            policy.halted(batch, failed, result.dead_lettered)
            try:
                policy.save_due(writer, idle=True)
            except TransientError as exc:
                self._log("halt_checkpoint_deferred", logging.WARNING, error=str(exc))
            raise _Halted(failed.position if failed is not None else None)
        policy.delivered(batch, result.dead_lettered)
        ctx.metrics.add("RecordsProcessed", len(batch), lease.stream, lease.shard_id)
        self._batch = ()

    def _graceful(
        self, processor: RecordProcessor, writer: CheckpointWriter, policy: CheckpointPolicy
    ) -> Outcome:
        try:  # first, so that a buffering processor can flush and mark its records done
            processor.shutdown_requested(
                ShutdownRequestedInput(writer.view(policy.position), self.lease.epoch)
            )
        except LeaseLostError:
            raise
        except Exception:  # the processor's callback (user code): the final checkpoint is still due
            logger.exception("shutdown_requested raised", extra={"event": "processor_shutdown_failed"})
        timeout = self._ctx.config.shutdown.final_checkpoint_timeout
        policy.wait_done(timeout, self.guard.is_valid)
        final = policy.position()
        deadline = self._ctx.clock.monotonic() + timeout
        while final is not None and writer.last != final:
            try:
                writer.write(final)
            except TransientError as exc:  # retried until the final checkpoint's own deadline
                if self._ctx.clock.monotonic() >= deadline:
                    self._log("final_checkpoint_failed", logging.WARNING, error=str(exc))
                    break
                time.sleep(0.1)
        self._log("shard_drained", checkpoint=str(writer.last))
        return Outcome.STOPPED

    def _end(self, processor: RecordProcessor, writer: CheckpointWriter, policy: CheckpointPolicy) -> Outcome:
        """SHARD_END, once every delivered record is done (manual mode waits for them)."""
        if not self._ended:
            self._ended = True
            policy.wait_done(None, self.guard.is_valid)
            processor.shard_ended(ShardEndedInput(writer.view(lambda: SHARD_END), self.lease.epoch))
        writer.flush_pending()  # a SHARD_END write that failed transiently is sent again from here
        if writer.last != SHARD_END:
            self._log(
                "shard_end_not_checkpointed",
                logging.ERROR,
                hint="shard_ended must call data.checkpointer.checkpoint(); children wait until it does",
            )
            raise _Halted(SHARD_END)
        return Outcome.SHARD_END

    def _lost(self) -> Outcome:
        if self._processor is not None:
            try:
                self._processor.lease_lost(
                    LeaseLostInput(self.lease.stream, self.lease.shard_id, self.lease.epoch)
                )
            except Exception:  # the processor's callback (user code): the lease is gone either way
                logger.exception("lease_lost raised", extra={"event": "processor_lease_lost_failed"})
        return Outcome.LOST
