"""Enhanced fan-out's one stream consumer per stream, found or registered as a worker starts, under the
consumer's retry policy.

A whole fleet starts at once (a deploy, a scale-out from zero), and the calls this takes have small quotas:
DescribeStreamSummary 20 a second per account, ListStreamConsumers 5 a second per stream,
RegisterStreamConsumer 5 a second per account. The worker's Kinesis client makes one attempt per call, so a
throttle reaches us: it is tried again after a capped, jittered exponential backoff, for as long as it lasts (a
throttle is not an outage); any other failure that may pass is tried again for ``give_up_after`` seconds, then
raised, as is at once a refusal or a missing stream.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from consumer.errors import TransientError
from consumer.lifecycle import retry
from consumer.logs import log_event
from consumer.retrieval.kinesis import FanOutApi

__all__ = ["register_with_retries"]

logger = logging.getLogger(__name__)

BACKOFF = retry.Backoff(base=0.5, cap=5.0, give_up_after=120.0)


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
