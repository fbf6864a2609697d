"""Delivering a batch to the processor: retries with backoff, then dead-letter or halt — never skip.

A retry (of the batch, or of one record) never hands again a record that this ownership has checkpointed
since: the processor said it is done (a ``checkpoint(record)`` after each record, then a failure further on),
so a transient failure is retried from the record that failed, and only a record that fails every attempt is
dead-lettered or halted on."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from consumer.config import ProcessingConfig
from consumer.errors import LeaseLostError
from consumer.logs import log_event
from consumer.metrics.sink import MetricsSink
from consumer.records import Position, Record
from consumer.sinks.dlq import DeadLetterQueue

__all__ = ["DeliveryOutcome", "DeliveryResult", "deliver"]

logger = logging.getLogger(__name__)


class DeliveryOutcome(enum.Enum):
    DONE = "done"  # every record processed or dead-lettered
    HALT = "halt"  # a record kept failing and the policy (or a failed DLQ send) halts the shard
    STOPPED = "stopped"  # shutdown or lease loss interrupted the retries


@dataclass(frozen=True)
class DeliveryResult:
    outcome: DeliveryOutcome
    dead_lettered: tuple[Record, ...] = ()
    failed_record: Record | None = None


def _attempts(
    call: Callable[[], None],
    cfg: ProcessingConfig,
    stop: threading.Event,
    what: str,
    metrics: MetricsSink,
    stream: str,
    shard: str,
    sub_sequence: int | None = None,
) -> BaseException | None:
    """Run ``call`` up to ``max_attempts`` times; return the last error, or None on success (only
    ``LeaseLostError`` is raised). ``what`` is "batch" or one record's sequence number; ``sub_sequence`` is
    that record's sub-sequence number (every user record of a KPL aggregate shares the sequence number)."""
    where = {} if sub_sequence is None else {"sub_sequence": sub_sequence}
    error: BaseException | None = None
    for attempt in range(1, cfg.max_attempts + 1):
        try:
            call()
            return None
        except LeaseLostError:
            raise
        except BaseException as exc:  # the processor's own failure (user code): retried up to max_attempts,
            error = exc  # then dead-lettered or halted by the policy, never skipped. Also a BaseException
            # (CancelledError, SystemExit ...; the adapter makes them CallbackAbortedError): on a worker
            # thread it could only end the thread and leave the shard waiting for the call for ever
            metrics.add("ProcessorFailures", 1, stream, shard)
            log_event(
                logger,
                "processor_failed",
                logging.WARNING,
                stream=stream,
                shard=shard,
                what=what,
                **where,
                attempt=attempt,
                error=repr(exc),
            )
            if attempt < cfg.max_attempts and stop.wait(
                min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
            ):
                return error
    return error


def _told(event: str, failure: BaseException | None, **fields: object) -> None:
    """``event`` at ERROR, with ``failure``'s traceback: the attempts before it told only its ``repr``, so a
    processor's bug (or one of ours in the DLQ) shows where it came from once, not on every attempt."""
    logger.error(event, exc_info=failure, extra={"event": event, **fields})


def _nothing_checkpointed() -> Position | None:
    return None


def _rest(batch: Sequence[Record], checkpointed: Callable[[], Position | None]) -> Sequence[Record]:
    """``batch`` less the records checkpointed (by a call before that checkpointed and then failed)."""
    done = checkpointed()
    if done is None or done < batch[0].position:
        return batch
    return [r for r in batch if done < r.position]


def _attempt(
    process: Callable[[Sequence[Record]], None],
    batch: Sequence[Record],
    checkpointed: Callable[[], Position | None],
) -> Callable[[], None]:
    """One try at ``batch``: what is not checkpointed of it (nothing left: the processor said all is done)."""

    def call() -> None:
        if left := _rest(batch, checkpointed):
            process(left)

    return call


def deliver(
    records: Sequence[Record],
    process: Callable[[Sequence[Record]], None],
    cfg: ProcessingConfig,
    dlq: DeadLetterQueue | None,
    epoch: int,
    stop: threading.Event,
    metrics: MetricsSink,
    checkpointed: Callable[[], Position | None] = _nothing_checkpointed,
) -> DeliveryResult:
    """Process a batch; after the batch fails every attempt, isolate the failing records one by one.

    ``checkpointed``: what this ownership has checkpointed (the writer's ``last``), read before each attempt:
    records at or before it are done and never handed again (nor dead-lettered, nor halted on)."""
    stream, shard = records[0].stream, records[0].shard_id
    batch = _attempt(process, records, checkpointed)
    if _attempts(batch, cfg, stop, "batch", metrics, stream, shard) is None:
        return DeliveryResult(DeliveryOutcome.DONE)
    if stop.is_set():
        return DeliveryResult(DeliveryOutcome.STOPPED)
    dead: list[Record] = []
    for record in _rest(records, checkpointed):
        single = _attempt(process, [record], checkpointed)
        error = _attempts(
            single, cfg, stop, record.sequence_number, metrics, stream, shard, record.sub_sequence_number
        )
        if error is None:
            continue
        if stop.is_set():
            return DeliveryResult(DeliveryOutcome.STOPPED, tuple(dead))
        if cfg.on_failure == "dlq" and dlq is not None:
            try:
                dlq.send(record, error, epoch)
            except Exception as exc:  # whatever kept the record from the DLQ, it halts the shard: never lost
                _told(
                    "dead_letter_failed",
                    exc,
                    stream=stream,
                    shard=shard,
                    sequence=record.sequence_number,
                    sub_sequence=record.sub_sequence_number,
                    error=repr(exc),
                )
                return DeliveryResult(DeliveryOutcome.HALT, tuple(dead), record)
            metrics.add("DeadLettered", 1, stream, shard)
            _told(
                "dead_lettered",
                error if not dead else None,  # the first of a batch shows where the processor failed
                stream=stream,
                shard=shard,
                sequence=record.sequence_number,
                sub_sequence=record.sub_sequence_number,
                error=repr(error),
            )
            dead.append(record)
            continue
        _told(
            "shard_halted",
            error,  # the processor's last failure, once: the shard halts on it
            stream=stream,
            shard=shard,
            sequence=record.sequence_number,
            sub_sequence=record.sub_sequence_number,
            error=repr(error),
        )
        return DeliveryResult(DeliveryOutcome.HALT, tuple(dead), record)
    return DeliveryResult(DeliveryOutcome.DONE, tuple(dead))
