"""The record processor API: lifecycle callbacks that take typed input objects."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from consumer.records import Position, Record

if TYPE_CHECKING:
    from consumer.metrics.sink import MetricsSink

__all__ = [
    "CallbackAbortedError",
    "Checkpointer",
    "InitializationInput",
    "LeaseGuard",
    "LeaseLostInput",
    "ProcessRecordsInput",
    "RecordProcessor",
    "ShardEndedInput",
    "ShutdownReason",
    "ShutdownRequestedInput",
    "Timers",
]


class CallbackAbortedError(Exception):
    """A processor's callback raised a ``BaseException`` that is not an ``Exception``: ``asyncio.CancelledError``
    (e.g. from code that runs ``asyncio`` inside a synchronous callback), ``KeyboardInterrupt`` or
    ``SystemExit`` (``sys.exit()``). It is the call's failure like any other (the original is its
    ``__cause__``): ``process_records`` is retried, then dead-lettered or the shard halted; ``initialize`` is
    retried with backoff. It never stops the worker: callbacks run on the worker's threads, where Python would
    only end that thread (stop a worker with SIGTERM or ``worker.request_shutdown()``)."""


class ShutdownReason(enum.Enum):
    """Why the coordinator stops a shard's processing. A shard that is closed and fully read is not
    stopped: its processor's ``shard_ended`` is called instead."""

    REQUESTED = "requested"  # graceful: worker shutdown or a hand-off to another worker
    LEASE_LOST = "lease_lost"  # the lease moved on without us: no checkpoint is possible


class LeaseGuard(Protocol):
    """Lets a processor with external side effects check, just before them, that it still owns the shard."""

    @property
    def epoch(self) -> int:
        """The ownership epoch: write it beside external side effects to fence out older owners."""
        ...

    def is_valid(self) -> bool:
        """Whether this worker can still prove that it owns the shard (checked on its own monotonic clock)."""
        ...

    def ensure_valid(self) -> None:
        """Raise ``LeaseLostError`` when the lease can no longer be proven ours."""
        ...


class Checkpointer(Protocol):
    """Writes this shard's checkpoint, fenced by the ownership epoch. Raises ``LeaseLostError`` when fenced."""

    def checkpoint(self, position: Position | Record | None = None) -> None:
        """Checkpoint ``position`` (a record or position), or everything delivered and done so far.

        At or behind this ownership's last checkpoint it is already saved: a no-op (the no-argument form may
        lag a ``checkpoint(record)`` made before it). Refused with nothing written, as the KCL refuses them: a
        record of another shard, a position past the last record this ownership handed to the processor, or
        SHARD_END outside ``shard_ended`` (``ValueError``); anything but a ``Record`` or ``Position``
        (``TypeError``); a position from before the batch in hand (``CheckpointRejectedError``: a checkpoint
        never moves back). A retry of ``process_records`` hands only the records after what was checkpointed."""
        ...

    async def acheckpoint(self, position: Position | Record | None = None) -> None:
        """``checkpoint`` for asyncio processors: the write runs on a thread, the event loop goes on."""
        ...

    @property
    def last_checkpoint(self) -> Position | None:
        """The position last written for this ownership (or the one it started at)."""
        ...


class Timers(Protocol):
    """A processor's own timers, run by the worker on the shard's lane: a callback never runs beside another
    call of the same processor (``process_records``, ``shutdown_requested``...), so it needs no lock."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, ``delay`` seconds from now (or later, after the call under way). Not called
        once the shard has ended; an exception it raises is logged."""
        ...


@dataclass(frozen=True)
class InitializationInput:
    """A shard's ownership begins: where it starts (the checkpoint, or the initial position without one).
    ``timers``: callbacks on the shard's lane (``Timers``; None where the engine has none, e.g. a test).
    ``metrics``: the worker's metrics (CloudWatch EMF when run by the CLI or ``create_worker``), for a
    processor's own counts (``metrics.add(name, value, stream, shard_id)``); None where there are none."""

    stream: str
    shard_id: str
    epoch: int
    starting_position: Position | None  # None: the shard's initial position (no checkpoint yet)
    initial_position: str
    guard: LeaseGuard
    timers: Timers | None = None
    metrics: MetricsSink | None = None


@dataclass(frozen=True)
class ProcessRecordsInput:
    """A batch of one shard's records, in order, with the checkpointer and the ownership's epoch and guard.

    ``deadline`` is when this worker's proof of ownership runs out if no heartbeat renews it, on
    ``time.monotonic()``: work past it may overlap a new owner's. A processor with external side effects
    checks ``guard.ensure_valid()`` just before each of them, or writes them with ``epoch`` where the
    target refuses an older epoch (checkpoints already are)."""

    records: Sequence[Record]
    checkpointer: Checkpointer
    epoch: int
    millis_behind_latest: int | None
    guard: LeaseGuard
    deadline: float = math.inf


@dataclass(frozen=True)
class LeaseLostInput:
    """The lease is gone; nothing can be checkpointed any more (``checkpoint()`` raises ``LeaseLostError``, and
    ``done()`` on this ownership's records is ignored: the next owner gets them again)."""

    stream: str
    shard_id: str
    epoch: int


@dataclass(frozen=True)
class ShardEndedInput:
    """The shard is fully read; call ``checkpointer.checkpoint()`` to checkpoint its end, or children wait."""

    checkpointer: Checkpointer
    epoch: int


@dataclass(frozen=True)
class ShutdownRequestedInput:
    """Last chance to checkpoint before the lease is handed over or released."""

    checkpointer: Checkpointer
    epoch: int


@runtime_checkable
class RecordProcessor(Protocol):
    """One instance per shard lease. Exceptions from ``process_records`` are retried, never skipped.

    Callbacks may also be coroutines (``async def``, see ``consumer.AsyncBaseProcessor``): the worker runs
    them on its event loop with the same guarantees."""

    def initialize(self, data: InitializationInput) -> None:
        """The shard's ownership begins (before its first batch)."""
        ...

    def process_records(self, data: ProcessRecordsInput) -> None:
        """Process one batch; raise to have it retried (then dead-lettered or the shard halted)."""
        ...

    def lease_lost(self, data: LeaseLostInput) -> None:
        """The lease moved on without a hand-off: stop side effects; nothing can be checkpointed."""
        ...

    def shard_ended(self, data: ShardEndedInput) -> None:
        """The shard is closed and fully read: checkpoint its end so that its children can start."""
        ...

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        """The worker stops or hands the shard over, or the shard halted on a record that kept failing: flush
        and checkpoint now (after a halt, what came before the failing record; the lease stays halted)."""
        ...


class BaseProcessor:
    """Convenience base: no-op callbacks, and the shard end checkpointed as the protocol requires.
    Subclasses define ``process_records``."""

    def initialize(self, data: InitializationInput) -> None:
        """Nothing to prepare by default."""
        return None

    def lease_lost(self, data: LeaseLostInput) -> None:
        """Nothing to undo by default (the lease is gone; nothing can be checkpointed)."""
        return None

    def shard_ended(self, data: ShardEndedInput) -> None:
        """Checkpoint the shard's end, so that its children can start."""
        data.checkpointer.checkpoint()

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        """Checkpoint what is done before the lease is handed over or released."""
        data.checkpointer.checkpoint()


__all__ += ["BaseProcessor"]
