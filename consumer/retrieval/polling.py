"""Polling retrieval of one shard: GetRecords, and iterator recovery."""

from __future__ import annotations

import logging
import threading
import time

from consumer.config import RetrievalConfig
from consumer.logs import log_event
from consumer.records import Position
from consumer.retrieval.kinesis import ExpiredIteratorError, KinesisApi
from consumer.retrieval.reader import Fetch, ReaderBase

__all__ = ["PollingReader"]

logger = logging.getLogger(__name__)


class PollingReader(ReaderBase):
    """GetRecords in a loop. An expired iterator is re-created from the last position returned (never
    later, so nothing is skipped; never earlier, so nothing already delivered is fetched again). A call that
    fails transiently keeps the iterator, which stays valid: the retry reads the same records again.

    Calls are paced: one starts at least ``idle_time_between_reads`` after the previous one started, with a
    backlog or without, so a shard is never read more than 1/idle times a second (4 at the default 0.25 s,
    under Kinesis's 5 GetRecords/s per shard) however fast the processor or fetch-ahead asks.
    ``interrupt`` ends a wait for the next slot at once.
    """

    def __init__(
        self,
        api: KinesisApi,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        *,
        after: Position | None,
        initial_position: str,
    ) -> None:
        super().__init__(stream, shard_id, config, after=after, initial_position=initial_position)
        self._api = api
        self._iterator: str | None = None
        self._interval = config.idle_time_between_reads
        self._next_call = 0.0  # monotonic time before which no GetRecords starts
        self._interrupted = threading.Event()

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

    def fetch(self) -> Fetch | None:
        wait = self._next_call - time.monotonic()
        if self._interrupted.is_set() or (wait > 0 and self._interrupted.wait(wait)):
            return None
        try:
            if self._iterator is None:
                self._iterator = self._new_iterator()
            self._next_call = time.monotonic() + self._interval
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
        records = self._accept(result.records)
        self._iterator = result.next_iterator
        return Fetch(records, result.next_iterator is None, result.millis_behind_latest)

    def interrupt(self) -> None:
        self._interrupted.set()
