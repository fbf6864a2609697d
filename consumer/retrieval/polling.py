"""Polling retrieval of one shard: GetRecords, and iterator recovery."""

from __future__ import annotations

import logging

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
    fails transiently keeps the iterator, which stays valid: the retry reads the same records again."""

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
        records = self._accept(result.records)
        self._iterator = result.next_iterator
        return Fetch(records, result.next_iterator is None, result.millis_behind_latest)
