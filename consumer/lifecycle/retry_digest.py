"""What one worker's shards retrying a failure tell the log, at a bounded rate.

While Kinesis or DynamoDB is unreachable every shard retries about once a second; a line per retry is a line
per shard per second. Instead, for each shard, its first failure of an episode (``transient_failure``,
WARNING) and its recovery (``shard_recovered``, INFO) are told once, and the retries in between are told for
the whole worker at most every ``REPEAT_EVERY`` seconds (``transient_failures``, WARNING: how many shards
retry, on which operation, since when, the longest next delay, the latest error).

Throttles are not failures and come between successes (a shard throttled, then read, then throttled again), so
they have no episodes: the worker's first throttle after a quiet ``REPEAT_EVERY`` is told at once
(``throttled``, INFO, with its shard), and the ones after it at most once every ``REPEAT_EVERY`` seconds for the
whole worker (``throttles``, INFO: how many since the last line, on how many shards, per operation). The
``Throttles.<Operation>`` metric counts every one.

Each shard machine calls it from its own step with its own ``now`` (monotonic), so it is tested on made-up
time; the worker's shard consumers share one (``ConsumerContext.retries``). Thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass

from consumer.logs import REPEAT_EVERY, log_event

__all__ = ["RetryDigest"]

logger = logging.getLogger(__name__)


@dataclass
class _Retrying:
    operation: str
    since: float
    delay: float
    error: str
    attempts: int
    last: float  # when it last failed


class RetryDigest:
    """The shards of one worker that are retrying a failure that may pass, keyed by (stream, shard)."""

    def __init__(self, every: float = REPEAT_EVERY) -> None:
        self._every = every
        self._lock = threading.Lock()
        self._retrying: dict[tuple[str, str], _Retrying] = {}
        self._told_at = float("-inf")
        self._throttle_told_at = float("-inf")
        self._throttles: list[tuple[str, str, str, float, str]] = []  # since the last throttle line

    def throttled(
        self, now: float, stream: str, shard: str, epoch: int, *, operation: str, delay: float, error: str
    ) -> None:
        """A shard's ``operation`` was throttled at ``now``; it tries again in ``delay`` seconds."""
        with self._lock:
            quiet = now - self._throttle_told_at >= self._every
            if quiet and not self._throttles:
                self._throttle_told_at = now
                summary = None
            else:
                self._throttles.append((stream, shard, operation, delay, error))
                summary = self._throttle_summary(now) if quiet else None
        if quiet and summary is None:
            log_event(
                logger,
                "throttled",
                stream=stream,
                shard=shard,
                epoch=epoch,
                operation=operation,
                delay_s=round(delay, 3),
                error=error,
            )
        elif summary is not None:
            log_event(logger, "throttles", logging.INFO, **summary)

    def _throttle_summary(self, now: float) -> dict[str, object]:
        """The throttles since the last line, told now (under the lock)."""
        told = self._throttles
        self._throttles = []
        since = self._throttle_told_at
        self._throttle_told_at = now
        return {
            "throttles": len(told),
            "shards": len({(stream, shard) for stream, shard, *_ in told}),
            "operations": dict(Counter(operation for _, _, operation, _, _ in told)),
            "streams": sorted({stream for stream, *_ in told}),
            "over_s": round(now - since, 3),
            "max_delay_s": round(max(delay for *_, delay, _ in told), 3),
            "error": told[-1][4],
        }

    def failed(
        self, now: float, stream: str, shard: str, epoch: int, *, operation: str, delay: float, error: str
    ) -> None:
        """A shard failed at ``now`` on ``operation`` and tries again in ``delay`` seconds."""
        key = (stream, shard)
        with self._lock:
            entry = self._retrying.get(key)
            first = entry is None
            if entry is None:
                entry = self._retrying[key] = _Retrying(operation, now, delay, error, 0, now)
            entry.operation, entry.delay, entry.error, entry.last = operation, delay, error, now
            entry.attempts += 1
            attempt = entry.attempts
            summary = self._summary(now) if not first else None
        if first:
            log_event(
                logger,
                "transient_failure",
                logging.WARNING,
                stream=stream,
                shard=shard,
                epoch=epoch,
                operation=operation,
                attempt=attempt,
                delay_s=round(delay, 3),
                error=error,
            )
        if summary is not None:
            log_event(logger, "transient_failures", logging.WARNING, **summary)

    def recovered(self, now: float, stream: str, shard: str, epoch: int) -> None:
        """A shard that was retrying got through at ``now``: told once."""
        with self._lock:
            entry = self._retrying.pop((stream, shard), None)
        if entry is not None:
            log_event(
                logger,
                "shard_recovered",
                stream=stream,
                shard=shard,
                epoch=epoch,
                failures=entry.attempts,
                failing_s=round(now - entry.since, 3),
            )

    def ended(self, stream: str, shard: str) -> None:
        """The shard's consumer ended (given up, lost, stopped): it retries no more here."""
        with self._lock:
            self._retrying.pop((stream, shard), None)

    @property
    def retrying(self) -> int:
        """How many shards are retrying now."""
        with self._lock:
            return len(self._retrying)

    def _summary(self, now: float) -> dict[str, object] | None:
        """The worker's summary, if one is due (under the lock)."""
        if not self._retrying or now - self._told_at < self._every:
            return None
        self._told_at = now
        entries = list(self._retrying.values())
        latest = max(entries, key=lambda e: e.last)
        return {
            "shards": len(entries),
            "operations": dict(Counter(e.operation for e in entries)),
            "streams": sorted({stream for stream, _ in self._retrying}),
            "failing_s": round(now - min(e.since for e in entries), 3),
            "attempts": sum(e.attempts for e in entries),
            "max_delay_s": round(max(e.delay for e in entries), 3),
            "error": latest.error,
        }
