"""The record processor API: lifecycle callbacks that take typed input objects."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from consumer.records import Position, Record

__all__ = [
    "Checkpointer",
    "InitializationInput",
    "LeaseGuard",
    "LeaseLostInput",
    "ProcessRecordsInput",
    "RecordProcessor",
    "ShardEndedInput",
    "ShutdownReason",
    "ShutdownRequestedInput",
]


class ShutdownReason(enum.Enum):
    """Why a shard's processing stops."""

    REQUESTED = "requested"  # graceful: worker shutdown or a hand-off to another worker
    LEASE_LOST = "lease_lost"  # the lease moved on without us: no checkpoint is possible
    SHARD_END = "shard_end"  # the shard is closed (split/merge) and fully read


class LeaseGuard(Protocol):
    """Lets a processor with external side effects check, just before them, that it still owns the shard."""

    @property
    def epoch(self) -> int: ...

    def is_valid(self) -> bool: ...

    def ensure_valid(self) -> None:
        """Raise ``LeaseLostError`` when the lease can no longer be proven ours."""
        ...


class Checkpointer(Protocol):
    """Writes this shard's checkpoint, fenced by the ownership epoch. Raises ``LeaseLostError`` when fenced."""

    def checkpoint(self, position: Position | Record | None = None) -> None:
        """Checkpoint ``position`` (a record or position), or everything delivered and done so far."""
        ...

    @property
    def last_checkpoint(self) -> Position | None: ...


@dataclass(frozen=True)
class InitializationInput:
    stream: str
    shard_id: str
    epoch: int
    starting_position: Position | None  # None: the shard's initial position (no checkpoint yet)
    initial_position: str
    guard: LeaseGuard


@dataclass(frozen=True)
class ProcessRecordsInput:
    records: Sequence[Record]
    checkpointer: Checkpointer
    epoch: int
    millis_behind_latest: int | None
    guard: LeaseGuard


@dataclass(frozen=True)
class LeaseLostInput:
    """The lease is gone; nothing can be checkpointed any more."""

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
    """One instance per shard lease. Exceptions from ``process_records`` are retried, never skipped."""

    def initialize(self, data: InitializationInput) -> None: ...

    def process_records(self, data: ProcessRecordsInput) -> None: ...

    def lease_lost(self, data: LeaseLostInput) -> None: ...

    def shard_ended(self, data: ShardEndedInput) -> None: ...

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None: ...


class BaseProcessor:
    """Convenience base: no-op callbacks, and the shard end checkpointed as the protocol requires."""

    def initialize(self, data: InitializationInput) -> None:
        return None

    def lease_lost(self, data: LeaseLostInput) -> None:
        return None

    def shard_ended(self, data: ShardEndedInput) -> None:
        data.checkpointer.checkpoint()

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        data.checkpointer.checkpoint()


__all__ += ["BaseProcessor"]
