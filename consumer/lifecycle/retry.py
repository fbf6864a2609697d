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

from consumer.errors import ThrottledError, is_retriable

__all__ = ["Backoff", "Verdict", "is_throttle", "next_try", "operation", "verdict", "write_backoff"]

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
    return str(getattr(cause, "operation_name", "") or getattr(exc, "operation", "") or "unknown")


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
    ``jitter`` in [0, 1) scales the delay to between half and all of it. Pure: the shard machine decides with it
    on made-up time."""
    if not throttled and since is None:
        since = now
    failures += 1
    if since is not None and now - since >= b.give_up_after:
        return failures, since, None
    return failures, since, min(b.cap, b.base * 2.0 ** (failures - 1)) * (0.5 + jitter / 2)


def write_backoff(failures: int) -> float:
    """The pause before a lease-table write that failed transiently is sent again (``failures`` so far):
    capped exponential backoff with jitter."""
    return min(2.0, 0.1 * 2.0 ** (failures - 1)) * (0.5 + random.random() / 2)
