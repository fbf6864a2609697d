"""Records as the processor sees them, and positions in a shard that order them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import total_ordering
from typing import Any, NamedTuple, Protocol

__all__ = ["SHARD_END", "Position", "Record"]


@total_ordering
@dataclass(frozen=True)
class Position:
    """A place in a shard: a sequence number (kept as a string, up to 56 digits) and a KPL sub-sequence.

    Positions order by (length, digits, sub-sequence), which is numeric order for sequence numbers.
    ``SHARD_END`` sorts after every real position.
    """

    sequence: str
    sub_sequence: int = 0

    def _key(self) -> tuple[int, str, int]:
        if self.sequence == "SHARD_END":
            return (10**6, "", 0)
        return (len(self.sequence), self.sequence, self.sub_sequence)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return self._key() < other._key()

    @property
    def is_shard_end(self) -> bool:
        """Whether this is the SHARD_END sentinel (the shard is closed and fully read)."""
        return self.sequence == "SHARD_END"

    def sort_key(self) -> str:
        """A string whose lexicographic order is the position order (used in DynamoDB conditions)."""
        if self.is_shard_end:
            return "~"
        return f"{len(self.sequence):03d}{self.sequence}:{self.sub_sequence:010d}"

    def __str__(self) -> str:
        return self.sequence if self.is_shard_end else f"{self.sequence}/{self.sub_sequence}"


SHARD_END = Position("SHARD_END", 0)


class _DoneSink(Protocol):
    def mark_done(self, index: int) -> None: ...


class _RecordFields(NamedTuple):
    stream: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    data: bytes
    approximate_arrival: datetime
    aggregated: bool = False
    explicit_hash_key: str | None = None


class Record(_RecordFields):
    """One user record (a KPL sub-record when the producer aggregated).

    ``data`` is always the raw bytes; ``json()`` parses it and ``text()`` decodes it, each raising
    when the bytes are not JSON / not UTF-8, so binary payloads reach the processor untouched.
    In manual checkpointing mode ``done()`` marks the record complete; it never blocks.

    Records are immutable and compare by their fields. They are built once per record, straight from
    what Kinesis returned (a named tuple: the cheapest immutable object Python builds, about a fifth of a
    frozen dataclass); the manual-mode tracker attaches itself to the same object, outside the fields.
    """

    _tracker: _DoneSink | None = None  # class-level defaults; manual mode sets them on the instance
    _index: int = -1

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Record is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Record is immutable: cannot delete {name!r}")

    def _attach(self, tracker: _DoneSink, index: int) -> None:
        """Give this record its ``done()`` (once, by the shard's tracker, before delivery)."""
        object.__setattr__(self, "_tracker", tracker)
        object.__setattr__(self, "_index", index)

    @property
    def position(self) -> Position:
        """Where this record stands in its shard (sequence and sub-sequence number)."""
        return Position(self.sequence_number, self.sub_sequence_number)

    def text(self) -> str:
        """The data as UTF-8 text (raises ``UnicodeDecodeError`` otherwise)."""
        return self.data.decode("utf-8")

    def json(self) -> Any:
        """The data parsed as JSON (raises ``ValueError`` otherwise)."""
        return json.loads(self.data)

    def done(self) -> None:
        """Mark this record processed (manual checkpointing). Safe from any thread, never blocks on I/O."""
        if self._tracker is None:
            raise RuntimeError("done() is only available in manual checkpointing mode")
        self._tracker.mark_done(self._index)
