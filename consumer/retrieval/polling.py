"""Polling retrieval of one shard: GetRecords, and iterator recovery."""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from consumer.clock import Clock, SystemClock
from consumer.config import RetrievalConfig
from consumer.errors import MissingResourceError, ThrottledError, TransientError
from consumer.logs import log_event
from consumer.records import Position
from consumer.retrieval.kinesis import ExpiredIteratorError, KinesisApi
from consumer.retrieval.pacing import Pacer, PaceSettings
from consumer.retrieval.reader import Fetch, ReaderBase

__all__ = ["PollingReader"]

logger = logging.getLogger(__name__)


class PollingReader(ReaderBase):
    """GetRecords in a loop. An expired iterator is re-created from the last position returned (never
    later, so nothing is skipped; never earlier, so nothing already delivered is fetched again). A call that
    fails transiently keeps the iterator, which stays valid: the retry reads the same records again.

    Calls are paced from start to start by a ``Pacer``: as fast as AWS's per-shard limits allow while the
    shard is behind (``reads_per_second`` calls, ``read_bytes_per_second`` bytes), every
    ``idle_time_between_reads`` once it is caught up, slower after a throttle; however fast the processor or
    fetch-ahead asks. ``interrupt`` ends a wait for the next slot at once.
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
        clock: Clock | None = None,
        timestamp: datetime | None = None,
    ) -> None:
        super().__init__(
            stream, shard_id, config, after=after, initial_position=initial_position, timestamp=timestamp
        )
        self._api = api
        self._clock = clock or SystemClock()
        self._iterator: str | None = None
        self.pacer = Pacer(
            PaceSettings(
                config.idle_time_between_reads, config.reads_per_second, config.read_bytes_per_second
            )
        )
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

    def ready_at(self) -> float:
        """When the next call may start (the runner waits for it on a timer, not on a thread)."""
        return self.pacer.next_start

    def fetch(self) -> Fetch | None:
        wait = self.pacer.next_start - self._clock.monotonic()
        if self._interrupted.is_set() or (wait > 0 and self._interrupted.wait(wait)):
            return None
        started = self._clock.monotonic()
        try:
            if self._iterator is None:
                self._iterator = self._new_iterator()
            try:
                result = self._api.get_records(self._iterator, self._cfg.max_records)
            except MissingResourceError as exc:  # GetRecords names no stream: say which shard it was
                raise MissingResourceError(f"Kinesis stream {self._stream!r}, {self._shard}: {exc}") from exc
            ended = self._clock.monotonic()
        except ExpiredIteratorError:
            self._iterator = None
            self.pacer.failed(started)
            log_event(
                logger,
                "iterator_expired",
                logging.WARNING,
                stream=self._stream,
                shard=self._shard,
                resume_after=str(self._after),
            )
            return None
        except ThrottledError:
            self.pacer.throttled(started)
            raise
        except TransientError:
            self.pacer.failed(started)
            raise
        size = self._size(result.records)
        records = self._accept(result.records)
        self._iterator = result.next_iterator
        behind = result.millis_behind_latest
        count, limit = len(result.records), self._cfg.max_records
        self.pacer.served(started, ended, records=count, data_bytes=size, limit=limit, behind_ms=behind)
        return Fetch(records, result.next_iterator is None, behind)

    def interrupt(self) -> None:
        self._interrupted.set()
