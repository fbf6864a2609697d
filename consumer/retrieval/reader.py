"""What a shard consumer needs from retrieval: ``fetch`` the next records; ``interrupt`` a blocked fetch from
another thread; ``close`` when done. (The shard runner fetches ahead while a batch is delivered.)"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from consumer.config import RetrievalConfig
from consumer.records import Position, Record
from consumer.retrieval.kinesis import WireRecord, to_records

__all__ = ["Fetch", "ReaderBase", "ShardReader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetch:
    records: list[Record]
    shard_end: bool
    millis_behind_latest: int | None


class ShardReader(Protocol):
    """Reads one shard from a start position; records at or before it are never returned again."""

    def fetch(self) -> Fetch | None:
        """The next records, or ``None`` when there is nothing yet (e.g. an iterator was renewed). Raises
        ``TransientError`` for a failure worth retrying; the caller's retry policy decides when."""
        ...

    def interrupt(self) -> None:
        """From any thread, at any time: make a blocked or upcoming fetch return soon. Idempotent."""
        ...

    def close(self) -> None:
        """From the reading thread: release what the reader holds (a later fetch may open it again)."""
        ...


class ReaderBase:
    """Position tracking and record building shared by the polling and fan-out readers.

    Starting at a checkpoint uses AT_SEQUENCE_NUMBER and drops what was already done, which also resumes
    correctly in the middle of a KPL-aggregated record.
    """

    def __init__(
        self,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        *,
        after: Position | None,
        initial_position: str,
        timestamp: datetime | None = None,
    ) -> None:
        self._stream = stream
        self._shard = shard_id
        self._cfg = config
        self._after = after
        self._initial = initial_position  # used only while there is no position to resume from
        # AT_TIMESTAMP's time: ``timestamp`` (LATEST fixed when its lease was created) or the configured one.
        self._timestamp = timestamp if timestamp is not None else config.initial_timestamp

    @staticmethod
    def _size(wire: Sequence[WireRecord]) -> int:
        """The bytes a response counts against the shard's read limit (2 MiB/s of data read)."""
        return sum(len(w["Data"]) for w in wire)

    def _accept(self, wire: Sequence[WireRecord]) -> list[Record]:
        records = to_records(self._stream, self._shard, wire)
        after = self._after
        if after is not None and records:
            # A shard's records come in order, so only a prefix can be at or before the last position
            # (the rest of an aggregate we resume inside, or a record fetched again after a renewal).
            skip = 0
            while skip < len(records) and not after < records[skip].position:
                skip += 1
            del records[:skip]
        if records:
            last = records[-1]
            self._after = Position(last.sequence_number, last.sub_sequence_number)
        return records

    def interrupt(self) -> None:
        return None

    def close(self) -> None:
        return None
