"""One shard's processing loop, on its own thread: fetch, deliver, checkpoint, and end in one known way."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from consumer.checkpoint.checkpointer import CheckpointWriter, OrderedTracker, ShardCheckpointer
from consumer.checkpoint.store import CheckpointStore
from consumer.clock import Clock
from consumer.config import StreamSpec, WorkerConfig
from consumer.errors import ConsumerError, LeaseLostError
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Lease
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.logs import log_event
from consumer.metrics.sink import MetricsSink
from consumer.records import SHARD_END, Position, Record
from consumer.retrieval.fanout import FanOutReader
from consumer.retrieval.kinesis import FanOutApi, KinesisApi, UserRecord
from consumer.retrieval.polling import PollingReader
from consumer.retrieval.reader import ShardReader
from consumer.sinks.dlq import DeadLetterQueue

__all__ = ["ConsumerContext", "Outcome", "ShardConsumer", "ShardGuard"]

logger = logging.getLogger(__name__)


class Outcome(enum.Enum):
    SHARD_END = "shard_end"  # SHARD_END checkpointed: mark the lease ENDED
    STOPPED = "stopped"  # drained and checkpointed on request: hand the lease over or release it
    LOST = "lost"  # the lease moved on: nothing more to do
    HALTED = (
        "halted"  # a record failed every attempt (policy halt): keep the lease, report, wait for an operator
    )
    FAILED = "failed"  # an unexpected error in the loop itself


class ShardGuard:
    """``LeaseGuard`` for one ownership: valid while not lost and our heartbeat window is open."""

    def __init__(self, epoch: int, validity: OwnValidity) -> None:
        self._epoch = epoch
        self._validity = validity
        self.lost = threading.Event()

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_valid(self) -> bool:
        return not self.lost.is_set() and self._validity.valid()

    def ensure_valid(self) -> None:
        if self.lost.is_set():
            raise LeaseLostError(f"lease lost (epoch {self._epoch})")
        if not self._validity.valid():
            raise LeaseLostError(
                f"lease validity lapsed (epoch {self._epoch}): heartbeat not renewed in time"
            )

    def mark_lost(self) -> None:
        self.lost.set()


@dataclass(frozen=True)
class ConsumerContext:
    config: WorkerConfig
    kinesis: KinesisApi
    checkpoints: CheckpointStore
    dlq: DeadLetterQueue | None
    metrics: MetricsSink
    validity: OwnValidity
    clock: Clock
    wake_coordinator: threading.Event
    fanout_arns: dict[str, str] = field(default_factory=dict)  # stream -> registered consumer ARN


def _to_record(stream: str, shard: str, r: UserRecord) -> Record:
    return Record(
        stream=stream,
        shard_id=shard,
        sequence_number=r.sequence_number,
        sub_sequence_number=r.sub_sequence_number,
        partition_key=r.partition_key,
        data=r.data,
        approximate_arrival=r.approximate_arrival,
        aggregated=r.aggregated,
        explicit_hash_key=r.explicit_hash_key,
    )


class ShardConsumer:
    def __init__(self, lease: Lease, spec: StreamSpec, ctx: ConsumerContext) -> None:
        self.lease = lease
        self._spec = spec
        self._ctx = ctx
        self.guard = ShardGuard(lease.epoch, ctx.validity)
        self._stop = threading.Event()  # wakes every wait in the loop
        self._stop_requested = False
        self.outcome: Outcome | None = None
        self.finished = threading.Event()
        self.stop_requested_at: float | None = None
        self._tracker: OrderedTracker | None = None
        self._processed: Position | None = None
        self._processor: RecordProcessor | None = None
        self._reader: ShardReader | None = None
        self._thread = threading.Thread(target=self._main, name=f"shard-{lease.shard_id}", daemon=True)

    # -- control, from the coordinator --------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Drain: finish the batch in flight, let the processor checkpoint, final checkpoint, stop."""
        if not self._stop_requested:
            self.stop_requested_at = self._ctx.clock.monotonic()
        self._stop_requested = True
        self._interrupt()

    def lease_lost(self) -> None:
        self.guard.mark_lost()
        self._interrupt()

    def _interrupt(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.close()  # a fan-out subscription blocks until its next event otherwise

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # -- the loop -------------------------------------------------------------------------------
    def _log(self, event: str, level: int = logging.INFO, **fields: object) -> None:
        log_event(
            logger,
            event,
            level,
            stream=self.lease.stream,
            shard=self.lease.shard_id,
            epoch=self.lease.epoch,
            **fields,
        )

    def _main(self) -> None:
        try:
            self.outcome = self._run()
        except LeaseLostError as exc:
            self._log("lease_lost_in_loop", logging.WARNING, error=str(exc))
            self.outcome = self._lost(self._processor)
        except Exception:
            logger.exception(
                "shard loop failed", extra={"event": "shard_failed", "shard": self.lease.shard_id}
            )
            self.outcome = Outcome.FAILED
        finally:
            self._log("shard_stopped", outcome=self.outcome.value if self.outcome else None)
            self.finished.set()
            self._ctx.wake_coordinator.set()

    def _make_reader(self, start: Position | None, initial: str) -> ShardReader:
        ctx, lease, cfg = self._ctx, self.lease, self._ctx.config.retrieval
        common = (lease.stream, lease.shard_id, cfg, self._stop)
        if cfg.mode == "fanout":
            api: FanOutApi = ctx.kinesis  # type: ignore[assignment]  # the adapters implement both
            arn = ctx.fanout_arns[lease.stream]
            return FanOutReader(api, arn, *common, after=start, initial_position=initial)
        return PollingReader(ctx.kinesis, *common, after=start, initial_position=initial)

    def _default_position(self) -> Position | None:
        return self._tracker.watermark if self._tracker is not None else self._processed

    def _run(self) -> Outcome:
        ctx, lease = self._ctx, self.lease
        stored = ctx.checkpoints.get(lease.stream, lease.shard_id)
        if stored is None or stored.epoch != lease.epoch:
            self._log("lease_moved_before_start", logging.WARNING)
            return Outcome.LOST
        start = stored.position
        if start is not None and start.is_shard_end:
            return Outcome.SHARD_END
        processor = self._processor = self._spec.processor_factory()
        # A processor that buffers (e.g. the raw S3 sink) declares manual mode: auto checkpoints would
        # count records as done the moment they were handed over.
        if getattr(processor, "checkpoint_mode", ctx.config.checkpoint.mode) == "manual":
            self._tracker = OrderedTracker()
        writer = CheckpointWriter(
            ctx.checkpoints,
            lease.stream,
            lease.shard_id,
            self.guard,
            start,
            self.guard.mark_lost,
            lambda _p: ctx.metrics.add("Checkpoints", 1, lease.stream, lease.shard_id),
        )
        self._processed = start
        initial = "TRIM_HORIZON" if lease.parents else ctx.config.retrieval.initial_position
        processor.initialize(
            InitializationInput(lease.stream, lease.shard_id, lease.epoch, start, initial, self.guard)
        )
        self._log("shard_started", starting_position=str(start) if start else initial)
        reader = self._reader = self._make_reader(start, initial)
        view = writer.view(self._default_position)
        flush_every = ctx.config.checkpoint.flush_interval
        last_flush = ctx.clock.monotonic()
        batch: Sequence[Record] = ()
        shard_end = False
        behind: int | None = None
        while True:
            if self.guard.lost.is_set():
                return self._lost(processor)
            if self._stop_requested:
                return self._graceful(processor, writer)
            if not self.guard.is_valid():
                self._stop.wait(0.05)  # suspended until the coordinator renews or declares the lease lost
                continue
            try:
                if not batch and not shard_end:
                    fetched = reader.fetch()
                    if fetched is None:
                        continue
                    shard_end = fetched.shard_end
                    behind = fetched.millis_behind_latest
                    if behind is not None:
                        ctx.metrics.add("MillisBehindLatest", behind, lease.stream, lease.shard_id)
                    batch = [_to_record(lease.stream, lease.shard_id, r) for r in fetched.records]
                    if self._tracker is not None:
                        batch = self._tracker.track(batch)
                    if not batch and not shard_end and ctx.config.retrieval.mode == "polling":
                        self._stop.wait(ctx.config.retrieval.idle_time_between_reads)
                if batch:
                    delivered = self._deliver(processor, batch, view, behind, writer)
                    if delivered is DeliveryOutcome.HALT:
                        return Outcome.HALTED
                    if delivered is DeliveryOutcome.STOPPED:
                        continue  # interrupted: the batch stays unacknowledged, the next owner gets it again
                    batch = ()
                now = ctx.clock.monotonic()
                if self._tracker is not None and (now - last_flush >= flush_every or not batch):
                    self._flush(writer)
                    last_flush = now
                elif (
                    self._tracker is None
                    and self._processed != writer.last
                    and (now - last_flush >= ctx.config.checkpoint.auto_interval)
                ):
                    assert self._processed is not None
                    writer.write(self._processed)
                    last_flush = now
                if shard_end and not batch:
                    return self._end(processor, writer)
            except LeaseLostError:
                if self.guard.lost.is_set():
                    raise
                # Our heartbeat window closed mid-step, the lease is not known lost: suspend (top of the
                # loop), then redo what was not done. An interrupted batch is delivered again.
                continue

    def _deliver(
        self,
        processor: RecordProcessor,
        batch: Sequence[Record],
        view: ShardCheckpointer,
        behind: int | None,
        writer: CheckpointWriter,
    ) -> DeliveryOutcome:
        ctx, lease = self._ctx, self.lease

        def call(records: Sequence[Record]) -> None:
            self.guard.ensure_valid()
            processor.process_records(ProcessRecordsInput(records, view, lease.epoch, behind, self.guard))

        result = deliver(batch, call, ctx.config.processing, ctx.dlq, lease.epoch, self._stop, ctx.metrics)
        if result.outcome is DeliveryOutcome.STOPPED:
            return result.outcome
        for dead in result.dead_lettered:
            if self._tracker is not None:
                dead.done()
        if result.outcome is DeliveryOutcome.HALT:
            failed = result.failed_record
            before = [r for r in batch if failed is not None and r.position < failed.position]
            if self._tracker is None and before:
                self._processed = before[-1].position
                writer.write(self._processed)
            elif self._tracker is not None:
                self._flush(writer)
            ctx.metrics.add("ShardsHalted", 1, lease.stream, lease.shard_id)
            return result.outcome
        ctx.metrics.add("RecordsProcessed", len(batch), lease.stream, lease.shard_id)
        self._processed = batch[-1].position  # auto mode: checkpointed by the loop (every batch by default)
        return result.outcome

    def _flush(self, writer: CheckpointWriter) -> None:
        if self._tracker is not None and (mark := self._tracker.watermark) is not None:
            writer.write(mark)

    def _wait_all_done(self, timeout: float | None) -> None:
        """Manual mode: wait (bounded, or while the lease is valid) for in-flight records to be marked done."""
        if self._tracker is None:
            return
        clock = self._ctx.clock
        until = None if timeout is None else clock.monotonic() + timeout
        while (
            self._tracker.pending and self.guard.is_valid() and (until is None or clock.monotonic() < until)
        ):
            if until is None and self._stop_requested:
                break
            self.finished.wait(0.005)

    def _graceful(self, processor: RecordProcessor, writer: CheckpointWriter) -> Outcome:
        try:  # first, so that a buffering processor can flush and mark its records done
            processor.shutdown_requested(
                ShutdownRequestedInput(writer.view(self._default_position), self.lease.epoch)
            )
        except LeaseLostError:
            raise
        except Exception:
            logger.exception("shutdown_requested raised", extra={"event": "processor_shutdown_failed"})
        self._wait_all_done(self._ctx.config.shutdown.final_checkpoint_timeout)
        final = self._default_position()
        if final is not None:
            writer.write(final)
        self._log("shard_drained", checkpoint=str(writer.last))
        return Outcome.STOPPED

    def _shard_end_position(self) -> Position | None:
        """SHARD_END, once every delivered record is done (manual mode waits for them)."""
        self._wait_all_done(None)
        if self._tracker is not None and self._tracker.pending:
            raise ConsumerError("shard end not checkpointed: records were still in flight when stopping")
        return SHARD_END

    def _end(self, processor: RecordProcessor, writer: CheckpointWriter) -> Outcome:
        processor.shard_ended(ShardEndedInput(writer.view(self._shard_end_position), self.lease.epoch))
        if writer.last != SHARD_END:
            self._log(
                "shard_end_not_checkpointed",
                logging.ERROR,
                hint="shard_ended must call data.checkpointer.checkpoint(); children wait until it does",
            )
            return Outcome.HALTED
        return Outcome.SHARD_END

    def _lost(self, processor: RecordProcessor | None) -> Outcome:
        if self._tracker is not None:
            self._tracker.close()
        if processor is not None:
            try:
                processor.lease_lost(LeaseLostInput(self.lease.stream, self.lease.shard_id, self.lease.epoch))
            except Exception:
                logger.exception("lease_lost raised", extra={"event": "processor_lease_lost_failed"})
        return Outcome.LOST
