"""Enhanced fan-out retrieval of one shard: SubscribeToShard, re-subscribing every 5 minutes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime

from consumer.clock import Clock, SystemClock
from consumer.config import RetrievalConfig
from consumer.errors import MissingResourceError
from consumer.logs import log_event
from consumer.records import Position
from consumer.retrieval.kinesis import FanOutApi, Subscription, SubscriptionEvent
from consumer.retrieval.reader import Fetch, ReaderBase

__all__ = ["FanOutReader"]

logger = logging.getLogger(__name__)


class FanOutReader(ReaderBase):
    """Records pushed over an HTTP/2 subscription (dedicated 2 MB/s per consumer and shard).

    A subscription ends after 5 minutes; the next one starts after the last continuation sequence number
    (or, before any event, at the checkpoint or the initial position). Subscriptions start at most once every
    ``fanout_subscribe_interval`` seconds (AWS allows one SubscribeToShard a second per consumer and shard), so
    the renewal after a broken subscription is not refused for its rate. ``interrupt`` ends a subscription that
    is blocked waiting for events, so a hand-off does not wait for the next event; one that is still being
    opened when interrupted is closed as soon as it exists (the flag and the subscription share a lock).
    """

    def __init__(
        self,
        api: FanOutApi,
        consumer_arn: str,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        *,
        after: Position | None,
        initial_position: str,
        clock: Clock | None = None,
        timestamp: datetime | None = None,
        renew: Callable[[str], str | None] | None = None,
    ) -> None:
        """``renew``: given the consumer ARN a subscription found gone, the one to use now (None: none yet,
        the error stands); see ``consumer.lifecycle.fanout_start.FanOutConsumers.renewed``."""
        super().__init__(
            stream, shard_id, config, after=after, initial_position=initial_position, timestamp=timestamp
        )
        self._api = api
        self._clock = clock or SystemClock()
        self._next_subscribe = float("-inf")
        self._wake = threading.Event()  # set by interrupt: ends a wait for the next subscription slot
        self._arn = consumer_arn
        self._renew = renew
        self._continuation: str | None = None
        self._subscription: Subscription | None = None
        self._events: Iterator[SubscriptionEvent] | None = None
        self._lock = threading.Lock()
        self._interrupted = False

    def _subscribe(self) -> Iterator[SubscriptionEvent]:
        if self._continuation is not None:
            sub = self._api.subscribe(
                self._arn, self._shard, "AFTER_SEQUENCE_NUMBER", sequence=self._continuation
            )
        elif self._after is not None:
            sub = self._api.subscribe(
                self._arn, self._shard, "AT_SEQUENCE_NUMBER", sequence=self._after.sequence
            )
        elif self._initial == "AT_TIMESTAMP":
            sub = self._api.subscribe(self._arn, self._shard, "AT_TIMESTAMP", timestamp=self._timestamp)
        else:
            sub = self._api.subscribe(self._arn, self._shard, self._initial)
        with self._lock:
            self._subscription = sub
            interrupted = self._interrupted
        if interrupted:
            self._close(sub)
            raise StopIteration
        return iter(sub)

    def ready_at(self) -> float:
        """When the next fetch may start: the next subscription's slot (the runner waits on a timer)."""
        return self._next_subscribe if self._events is None else float("-inf")

    def fetch(self) -> Fetch | None:
        if self._events is None:
            wait = self._next_subscribe - self._clock.monotonic()
            if wait > 0 and self._wake.wait(wait):
                return None
            self._next_subscribe = self._clock.monotonic() + self._cfg.fanout_subscribe_interval
        try:
            if self._events is None:
                self._events = self._subscribe()
            event = next(self._events)
        except StopIteration:
            self._events = None  # the 5-minute subscription ended (or was interrupted): subscribe again
            log_event(logger, "subscription_renewed", logging.DEBUG, stream=self._stream, shard=self._shard)
            return None
        except (
            Exception
        ) as exc:  # not swallowed: forget the subscription, then raise it for the loop's verdict
            self._events = None  # a broken or refused subscription: the retry subscribes again
            with self._lock:
                if self._interrupted:  # we closed it under the reader's feet: whatever it raised, we stop
                    return None
            if isinstance(exc, MissingResourceError) and self._renewed():
                return None  # the next fetch subscribes with the consumer registered again
            raise
        records = self._accept(event.records)
        if event.continuation_sequence is not None:
            self._continuation = event.continuation_sequence
        return Fetch(records, event.continuation_sequence is None, event.millis_behind_latest)

    def _renewed(self) -> bool:
        """After a subscription found no such consumer: whether another ARN is now to be used."""
        new = self._renew(self._arn) if self._renew is not None else None
        if new is None or new == self._arn:
            return False
        log_event(logger, "fanout_consumer_renewed", stream=self._stream, shard=self._shard, arn=new)
        self._arn = new
        self._next_subscribe = float("-inf")  # at once: the old consumer's subscription slot does not apply
        return True

    def interrupt(self) -> None:
        self._wake.set()
        with self._lock:
            self._interrupted = True
            sub = self._subscription
        if sub is not None:
            self._close(sub)

    def close(self) -> None:
        """From the reading thread: end the open subscription, if any. A later fetch subscribes again (at the
        continuation), so a suspended owner does not hold the one subscription a shard's consumer may have."""
        with self._lock:
            sub, self._subscription = self._subscription, None
        self._events = None
        if sub is not None:
            self._close(sub)

    @staticmethod
    def _close(sub: Subscription) -> None:
        try:
            sub.close()
        except Exception as exc:  # closing a stream that already ended
            log_event(logger, "subscription_close_failed", logging.DEBUG, error=repr(exc))
