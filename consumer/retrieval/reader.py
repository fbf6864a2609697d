"""What the shard loop needs from retrieval: ``fetch`` the next records; ``interrupt`` a blocked fetch from
another thread; ``close`` from the reading thread itself when done."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from consumer.config import RetrievalConfig
from consumer.records import Position
from consumer.retrieval.kinesis import RawRecord, UserRecord, deaggregate

__all__ = ["Fetch", "ReaderBase", "ShardReader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetch:
    records: list[UserRecord]
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
        """From the reading thread, once done: release what the reader holds."""
        ...


class ReaderBase:
    """Position tracking and de-aggregation shared by the polling and fan-out readers.

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
    ) -> None:
        self._stream = stream
        self._shard = shard_id
        self._cfg = config
        self._after = after
        self._initial = initial_position  # used only while there is no position to resume from
        self._timestamp = config.initial_timestamp

    def _accept(self, raw: tuple[RawRecord, ...]) -> list[UserRecord]:
        records = [
            r
            for r in deaggregate(raw)
            if self._after is None or Position(r.sequence_number, r.sub_sequence_number) > self._after
        ]
        if records:
            last = records[-1]
            self._after = Position(last.sequence_number, last.sub_sequence_number)
        return records

    def interrupt(self) -> None:
        return None

    def close(self) -> None:
        return None
