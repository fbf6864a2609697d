"""Pure rate primitives on a caller-supplied clock: a sliding-window call counter and a token bucket.

Nothing here reads a clock or takes a lock: every method takes ``now`` (seconds on a monotonic clock), so the
unit tests drive them with made-up time and the limiters decide under their own lock.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SlidingWindow:
    """At most ``limit`` events in any window of ``window`` seconds (a log of the last ``limit`` events).

    ``try_acquire(now)`` records an event and returns True when fewer than ``limit`` events happened in
    ``(now - window, now]``; otherwise it records nothing and returns False. A refused call does not count,
    as on AWS, where a throttled request consumes no quota.
    """

    __slots__ = ("_times", "limit", "window")

    def __init__(self, limit: int, window: float = 1.0) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        self.limit = limit
        self.window = window
        self._times: deque[float] = deque(maxlen=limit)

    def try_acquire(self, now: float) -> bool:
        """Count one event at ``now`` if the window has room; False (nothing counted) if it is full."""
        times = self._times
        if len(times) == self.limit and now - times[0] < self.window:
            return False
        times.append(now)  # maxlen drops the oldest
        return True

    def retry_after(self, now: float) -> float:
        """Seconds until :meth:`try_acquire` would succeed (0 if it would now)."""
        times = self._times
        if len(times) < self.limit:
            return 0.0
        return max(0.0, times[0] + self.window - now)

    def idle(self, now: float) -> bool:
        """True when no event is inside the window any more (the window can be forgotten)."""
        return not self._times or now - self._times[-1] >= self.window


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``capacity``; the level may go below zero (a debt).

    Two ways to spend:

    * ``try_take(now, amount)``: take ``amount`` if the bucket holds that many (a write sized up front);
    * ``admit(now)`` then ``charge(now, amount)``: let a call in while the level is not negative, and charge
      what it turned out to cost afterwards (a read whose size is known only from its response). A big read
      leaves a debt that refuses later calls until it is paid back at ``rate``.
    """

    __slots__ = ("_last", "capacity", "level", "rate")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.rate = rate
        self.capacity = capacity
        self.level = capacity
        self._last = now

    def _refill(self, now: float) -> None:
        elapsed = now - self._last
        if elapsed > 0:
            self.level = min(self.capacity, self.level + elapsed * self.rate)
            self._last = now

    def available(self, now: float) -> float:
        """The level at ``now`` (negative while a debt is outstanding)."""
        self._refill(now)
        return self.level

    def try_take(self, now: float, amount: float) -> bool:
        """Take ``amount`` tokens if at least that many are there (or, for an amount larger than the
        capacity, if the bucket is full); otherwise take nothing and return False."""
        self._refill(now)
        if self.level >= amount or (amount > self.capacity and self.level >= self.capacity):
            self.level -= amount
            return True
        return False

    def admit(self, now: float) -> bool:
        """True while the level is not negative (no outstanding debt)."""
        self._refill(now)
        return self.level >= 0

    def charge(self, now: float, amount: float) -> None:
        """Spend ``amount`` tokens unconditionally (the level may go negative)."""
        self._refill(now)
        self.level -= amount

    def retry_after(self, now: float, amount: float = 0.0) -> float:
        """Seconds until the level reaches ``min(amount, capacity)`` (0 if it already has)."""
        self._refill(now)
        need = min(amount, self.capacity) - self.level
        return max(0.0, need / self.rate)

    def idle(self, now: float) -> bool:
        """True when the bucket is full again (it can be forgotten and recreated full)."""
        self._refill(now)
        return self.level >= self.capacity


class Keyed(Generic[T]):
    """A dict of rate objects created on first use, pruned of idle ones when it grows past ``max_keys``."""

    __slots__ = ("_factory", "_items", "_next_prune", "max_keys")

    def __init__(self, factory: Callable[[float], T], max_keys: int = 50_000) -> None:
        self._factory = factory
        self._items: dict[object, T] = {}
        self.max_keys = max_keys
        self._next_prune = max_keys

    def get(self, key: object, now: float) -> T:
        """The rate object for ``key``, created (full) if it is new."""
        item = self._items.get(key)
        if item is None:
            if len(self._items) >= self._next_prune:
                self._prune(now)
            item = self._items[key] = self._factory(now)
        return item

    def __len__(self) -> int:
        return len(self._items)

    def _prune(self, now: float) -> None:
        before = len(self._items)
        self._items = {k: v for k, v in self._items.items() if not v.idle(now)}  # type: ignore[attr-defined]
        self._next_prune = max(self.max_keys, 2 * len(self._items))
        logger.debug("pruned %d idle rate keys, %d left", before - len(self._items), len(self._items))
