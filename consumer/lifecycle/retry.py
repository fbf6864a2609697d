"""What a failure means, decided in one place (``verdict``), and the one retry policy for a shard's
failures that may pass: capped exponential backoff with jitter, and a bound past which the owner gives the
shard up so that another worker can try.

A throttle is not an outage: it is backed off like any failure but never counts towards the bound (a
per-shard limit follows the shard, so handing it to another worker would only move the throttle), and each
is counted per operation in the shard's ``Throttles.<Operation>`` metric (``operation`` names it). An error
that is not ``retriable`` (a bug, a validation error or any other refusal, a missing resource) is never
retried: retrying cannot fix it, and retrying it for ever would only hide it."""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass

from consumer.clock import Clock
from consumer.errors import ThrottledError, is_retriable
from consumer.logs import log_event

__all__ = ["Backoff", "RetryPolicy", "Verdict", "is_throttle", "next_try", "operation", "verdict"]

logger = logging.getLogger(__name__)


class Verdict(enum.Enum):
    """What to do about a failed call."""

    BACK_OFF = "back_off"  # a throttle: slow down and try again; never counts towards giving up
    RETRY = "retry"  # it may pass: try again with backoff, within the caller's bound
    SURFACE = "surface"  # a bug or a refusal: stop trying, and end loudly where the caller says


def verdict(exc: BaseException) -> Verdict:
    """The one decision, from the error's ``retriable`` flag (``consumer.aws_errors.classify`` sets it for
    every provider failure; anything else, a bug of ours, is not retriable)."""
    if isinstance(exc, ThrottledError):
        return Verdict.BACK_OFF
    return Verdict.RETRY if is_retriable(exc) else Verdict.SURFACE


def is_throttle(exc: BaseException) -> bool:
    """Whether ``exc`` is a provider's "slow down" rather than a failure."""
    return verdict(exc) is Verdict.BACK_OFF


def operation(exc: BaseException) -> str:
    """The provider operation that raised ``exc`` (botocore's, where the error was translated), or "unknown"."""
    cause = exc.__cause__
    return str(getattr(cause, "operation_name", "") or "unknown")


@dataclass(frozen=True)
class Backoff:
    """The bounds of a retry: capped exponential backoff from ``base``, given up after ``give_up_after``."""

    base: float
    cap: float
    give_up_after: float


def next_try(
    b: Backoff, failures: int, since: float | None, now: float, *, throttled: bool, jitter: float
) -> tuple[int, float | None, float | None]:
    """After one more failure at ``now``: the failures so far, since when the shard has been failing (a
    throttle never starts the count) and the delay before the next try, ``None`` once past the bound.
    ``jitter`` in [0, 1) scales the delay to between half and all of it. Pure: ``RetryPolicy`` and the shard
    machine both decide with it."""
    if not throttled and since is None:
        since = now
    failures += 1
    if since is not None and now - since >= b.give_up_after:
        return failures, since, None
    return failures, since, min(b.cap, b.base * 2.0 ** (failures - 1)) * (0.5 + jitter / 2)


class RetryPolicy:
    """Backoff for one shard's failures that may pass (``verdict`` not ``SURFACE``), and the give-up bound."""

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
        """Seconds since the first failure (not a throttle) after the last success; 0 when none."""
        return 0.0 if self._since is None else self._clock.monotonic() - self._since

    def succeeded(self) -> None:
        """A call went through: the failures before it no longer count."""
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

    def failed(self, exc: Exception) -> float | None:
        """How long to wait before the next try, or ``None`` once failing for longer than the bound (which
        throttles never reach). Only for errors worth retrying: the caller surfaces the others."""
        now = self._clock.monotonic()
        throttled = is_throttle(exc)
        bounds = Backoff(self._base, self._cap, self._give_up_after)
        self._failures, self._since, delay = next_try(
            bounds, self._failures, self._since, now, throttled=throttled, jitter=random.random()
        )
        if delay is None:
            assert self._since is not None
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
