"""Enhanced fan-out's one stream consumer per stream, found or registered as a worker starts, under the
consumer's retry policy.

A whole fleet starts at once (a deploy, a scale-out from zero), and the calls this takes have small quotas:
DescribeStreamSummary 20 a second per account, ListStreamConsumers 5 a second per stream,
RegisterStreamConsumer 5 a second per account. The worker's Kinesis client makes one attempt per call, so a
throttle reaches us: it is tried again after a capped, jittered exponential backoff, for as long as it lasts (a
throttle is not an outage); any other failure that may pass is tried again for ``give_up_after`` seconds, then
raised, as is at once a refusal or a missing stream.

A stream deleted and created again under the same name loses its stream consumer with it: a subscription
that finds it gone registers it again (``FanOutConsumers.renewed``, at most once per ``RENEW_INTERVAL`` per
stream, whatever the number of shards asking).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from consumer.errors import ConsumerError, TransientError
from consumer.lifecycle import retry
from consumer.logs import log_event
from consumer.retrieval.kinesis import FanOutApi

__all__ = ["RENEW_INTERVAL", "FanOutConsumers", "register_with_retries"]

logger = logging.getLogger(__name__)

BACKOFF = retry.Backoff(base=0.5, cap=5.0, give_up_after=120.0)
RENEW_INTERVAL = 10.0  # seconds between two registrations of one stream's consumer after a subscription


def register_with_retries(
    api: FanOutApi,
    stream: str,
    name: str,
    *,
    bounds: retry.Backoff = BACKOFF,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
) -> str:
    """The ARN of stream consumer ``name`` of ``stream`` once ACTIVE, registered if need be."""
    failures, since = 0, None
    while True:
        try:
            return api.register_consumer(stream, name)
        except TransientError as exc:
            throttled = retry.verdict(exc) is retry.Verdict.BACK_OFF
            failures, since, delay = retry.next_try(
                bounds, failures, since, now(), throttled=throttled, jitter=jitter()
            )
            if delay is None:
                raise
            log_event(
                logger,
                "fanout_register_retry",
                logging.INFO if throttled else logging.WARNING,
                stream=stream,
                consumer=name,
                attempt=failures,
                throttled=throttled,
                delay_s=round(delay, 3),
                error=str(exc),
            )
            sleep(delay)


class FanOutConsumers:
    """The registered stream consumer of each stream, by ARN; registered again when a subscription finds the
    one it used gone (the stream was deleted and created again)."""

    def __init__(
        self,
        api: FanOutApi,
        name: str,
        *,
        interval: float = RENEW_INTERVAL,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._name = name
        self._interval = interval
        self._now = now
        self._lock = threading.Lock()  # guards the maps below (never held across a call to AWS)
        self._renewing: dict[str, threading.Lock] = {}  # one renewal at a time per stream
        self._arns: dict[str, str] = {}
        self._tried: dict[str, float] = {}

    def ready(self, stream: str) -> str:
        """At start: found or registered under the retry policy (``register_with_retries``)."""
        arn = register_with_retries(self._api, stream, self._name)
        with self._lock:
            self._arns[stream] = arn
        return arn

    def arn(self, stream: str) -> str:
        """The ARN to subscribe with (``ready`` first)."""
        with self._lock:
            return self._arns[stream]

    def renewed(self, stream: str, stale: str) -> str | None:
        """A subscription with ``stale`` found no such consumer: the ARN to use now (another shard's renewal,
        or one registered here), or None when none can be had yet (tried within the interval, or the stream
        itself is missing: the caller's error stands). Shards of the stream that ask meanwhile wait for the
        one renewal under way; other streams' shards do not."""
        with self._lock:
            renewing = self._renewing.setdefault(stream, threading.Lock())
        with renewing:
            with self._lock:
                current = self._arns.get(stream)
                if current is not None and current != stale:
                    return current
                now = self._now()
                if now - self._tried.get(stream, float("-inf")) < self._interval:
                    return None
                self._tried[stream] = now
            try:
                arn = self._api.register_consumer(stream, self._name)
            except ConsumerError as exc:
                log_event(
                    logger,
                    "fanout_consumer_renew_failed",
                    logging.WARNING,
                    stream=stream,
                    consumer=self._name,
                    error=str(exc),
                )
                return None
            with self._lock:
                self._arns[stream] = arn
        log_event(
            logger,
            "fanout_consumer_registered_again",
            logging.WARNING,
            stream=stream,
            consumer=self._name,
            arn=arn,
            why="the consumer a subscription used is gone (the stream was created again)",
        )
        return arn
