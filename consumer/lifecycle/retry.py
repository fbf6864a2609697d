"""The one retry policy for a shard's transient failures: capped exponential backoff with jitter, and a
bound past which the owner gives the shard up so that another worker can try.

A throttle is not an outage: it is backed off like any failure but never counts towards the bound (a
per-shard limit follows the shard, so handing it to another worker would only move the throttle), and each
is counted per operation in the shard's ``Throttles.<Operation>`` metric (``operation`` names it)."""

from __future__ import annotations

import logging
import random

from consumer.clock import Clock
from consumer.errors import ThrottledError, TransientError
from consumer.logs import log_event

__all__ = ["RetryPolicy", "is_throttle", "operation"]

logger = logging.getLogger(__name__)


def is_throttle(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider's "slow down" rather than a failure."""
    return isinstance(exc, ThrottledError)


def operation(exc: BaseException) -> str:
    """The provider operation that raised ``exc`` (botocore's, where the error was translated), or "unknown"."""
    cause = exc.__cause__
    return str(getattr(cause, "operation_name", "") or "unknown")


class RetryPolicy:
    def __init__(self, clock: Clock, base: float, cap: float, give_up_after: float, **log: object) -> None:
        self._clock = clock
        self._base = base
        self._cap = cap
        self._give_up_after = give_up_after
        self._log = log
        self._failures = 0
        self._since: float | None = None  # first failure (not a throttle) since the last success

    @property
    def failing_for(self) -> float:
        return 0.0 if self._since is None else self._clock.monotonic() - self._since

    def succeeded(self) -> None:
        if self._since is not None:
            log_event(
                logger,
                "shard_recovered",
                logging.INFO,
                failures=self._failures,
                after_s=round(self.failing_for, 3),
                **self._log,
            )
        self._failures = 0
        self._since = None

    def pause(self) -> None:
        """Suspended (our lease validity lapsed): failures before do not count against the bound."""
        self._since = None if self._since is None else self._clock.monotonic()

    def failed(self, exc: TransientError) -> float | None:
        """How long to wait before the next try, or ``None`` once failing for longer than the bound (which
        throttles never reach)."""
        now = self._clock.monotonic()
        throttled = is_throttle(exc)
        if not throttled and self._since is None:
            self._since = now
        self._failures += 1
        if self._since is not None and now - self._since >= self._give_up_after:
            log_event(
                logger,
                "shard_giving_up",
                logging.ERROR,
                failures=self._failures,
                failing_s=round(now - self._since, 3),
                error=str(exc),
                **self._log,
            )
            return None
        delay = min(self._cap, self._base * 2.0 ** (self._failures - 1)) * (0.5 + random.random() / 2)
        log_event(
            logger,
            "throttled" if throttled else "transient_failure",
            logging.INFO if throttled else logging.WARNING,
            attempt=self._failures,
            delay_s=round(delay, 3),
            error=str(exc),
            **self._log,
        )
        return delay
