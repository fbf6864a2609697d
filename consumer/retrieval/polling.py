"""Polling retrieval of one shard: GetRecords with backoff, iterator recovery and de-aggregation."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from datetime import datetime

from consumer.config import RetrievalConfig
from consumer.logs import log_event
from consumer.records import Position
from consumer.retrieval.kinesis import (
    ExpiredIteratorError,
    KinesisApi,
    ThrottledError,
    UserRecord,
    deaggregate,
)

__all__ = ["Fetch", "PollingReader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetch:
    records: list[UserRecord]
    shard_end: bool
    millis_behind_latest: int | None


class PollingReader:
    """Reads one shard from a start position; records at or before ``after`` are never returned again.

    Starting at a checkpoint uses AT_SEQUENCE_NUMBER and filters what was already done, which also
    resumes correctly in the middle of a KPL-aggregated record. An expired iterator is re-created from the
    last position returned (never later, so nothing is skipped).
    """

    def __init__(
        self,
        api: KinesisApi,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        stop: threading.Event,
        *,
        after: Position | None,
        initial_position: str,
        initial_timestamp: datetime | None,
    ) -> None:
        self._api = api
        self._stream = stream
        self._shard = shard_id
        self._cfg = config
        self._stop = stop
        self._after = after
        self._initial = initial_position
        self._timestamp = initial_timestamp
        self._iterator: str | None = None
        self._failures = 0

    def _new_iterator(self) -> str:
        if self._after is not None:
            return self._api.get_shard_iterator(
                self._stream, self._shard, "AT_SEQUENCE_NUMBER", sequence=self._after.sequence
            )
        if self._initial == "AT_TIMESTAMP":
            return self._api.get_shard_iterator(
                self._stream, self._shard, "AT_TIMESTAMP", timestamp=self._timestamp
            )
        return self._api.get_shard_iterator(self._stream, self._shard, self._initial)

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

    def fetch(self) -> Fetch | None:
        """One GetRecords round trip; ``None`` when it failed transiently (already backed off)."""
        try:
            if self._iterator is None:
                self._iterator = self._new_iterator()
            result = self._api.get_records(self._iterator, self._cfg.max_records)
        except ExpiredIteratorError:
            self._iterator = None
            log_event(
                logger,
                "iterator_expired",
                logging.WARNING,
                stream=self._stream,
                shard=self._shard,
                resume_after=str(self._after),
            )
            return None
        except ThrottledError as exc:
            self._backoff(str(exc))
            return None
        self._failures = 0
        records = [r for r in deaggregate(result.records) if self._keep(r)]
        if records:
            last = records[-1]
            self._after = Position(last.sequence_number, last.sub_sequence_number)
        self._iterator = result.next_iterator
        return Fetch(records, result.next_iterator is None, result.millis_behind_latest)

    def _keep(self, r: UserRecord) -> bool:
        return self._after is None or Position(r.sequence_number, r.sub_sequence_number) > self._after
