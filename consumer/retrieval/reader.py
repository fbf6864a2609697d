"""What the shard loop needs from retrieval: ``fetch`` the next records, ``close`` to interrupt."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import Protocol

from consumer.config import RetrievalConfig
from consumer.logs import log_event
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
        """The next records, or ``None`` after a transient failure (already backed off)."""
        ...

    def close(self) -> None:
        """Interrupt a blocking fetch (fan-out subscriptions block); the reader is not used again."""
        ...


class ReaderBase:
    """Position tracking, de-aggregation and backoff shared by the polling and fan-out readers.

    Starting at a checkpoint uses AT_SEQUENCE_NUMBER and drops what was already done, which also resumes
    correctly in the middle of a KPL-aggregated record.
    """

    def __init__(
        self,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        stop: threading.Event,
        *,
        after: Position | None,
        initial_position: str,
    ) -> None:
        self._stream = stream
        self._shard = shard_id
        self._cfg = config
        self._stop = stop
        self._after = after
        self._initial = initial_position  # used only while there is no position to resume from
        self._timestamp = config.initial_timestamp
        self._failures = 0

    def _accept(self, raw: tuple[RawRecord, ...]) -> list[UserRecord]:
        self._failures = 0
        records = [
            r
            for r in deaggregate(raw)
            if self._after is None or Position(r.sequence_number, r.sub_sequence_number) > self._after
        ]
        if records:
            last = records[-1]
            self._after = Position(last.sequence_number, last.sub_sequence_number)
        return records

    def _backoff(self, why: str) -> None:
        self._failures += 1
        delay = min(self._cfg.backoff_max, self._cfg.backoff_base * 2 ** (self._failures - 1))
        delay *= 0.5 + random.random() / 2
        log_event(
            logger,
            "retrieval_backoff",
            logging.WARNING,
            stream=self._stream,
            shard=self._shard,
            reason=why,
            delay_s=round(delay, 3),
        )
        self._stop.wait(delay)

    def close(self) -> None:
        return None
