"""Pure rate primitives: a sliding-window call counter and a token bucket.

Nothing here reads a clock or takes a lock: every method takes ``now`` (monotonic seconds), so the unit tests
drive them with made-up time and the limiters decide under their own lock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class SlidingWindow:
    """At most ``limit`` events in any window of ``window`` seconds (a log of the last ``limit`` events).

    A refused call is not counted, as on AWS, where a throttled request consumes no quota.
    """

    __slots__ = ("_times", "limit", "window")

    def __init__(self, limit: int, window: float = 1.0) -> None:
        self.limit = limit
        self.window = window
        self._times: deque[float] = deque(maxlen=limit)

    def try_acquire(self, now: float) -> bool:
        """Count one event at ``now`` if the window has room; False (nothing counted) if it is full."""
        if len(self._times) == self.limit and now - self._times[0] < self.window:
            return False
        self._times.append(now)  # maxlen drops the oldest
        return True

    def idle(self, now: float) -> bool:
        """True when no event is inside the window any more (the window can be forgotten)."""
        return not self._times or now - self._times[-1] >= self.window


class TokenBucket:
    """Tokens refill at ``rate`` per second up to ``capacity``; the level may go below zero (a debt).

    Spend with ``try_take`` (a write sized up front), or ``admit`` then ``charge`` (a read whose size is known
    only from its response: a big read leaves a debt that refuses later calls until it is paid back).
    """

    __slots__ = ("_last", "capacity", "level", "rate")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.level = capacity
        self._last = now

    def available(self, now: float) -> float:
        """The level at ``now`` (negative while a debt is outstanding)."""
        if now > self._last:
            self.level = min(self.capacity, self.level + (now - self._last) * self.rate)
            self._last = now
        return self.level

    def try_take(self, now: float, amount: float) -> bool:
        """Take ``amount`` tokens if at least that many are there (or, for an amount larger than the
        capacity, if the bucket is full); otherwise take nothing and return False."""
        if self.available(now) >= min(amount, self.capacity):
            self.level -= amount
            return True
        return False

    def admit(self, now: float) -> bool:
        """True while the level is not negative (no outstanding debt)."""
        return self.available(now) >= 0

    def charge(self, now: float, amount: float) -> None:
        """Spend ``amount`` tokens unconditionally (the level may go negative)."""
        self.available(now)
        self.level -= amount

    def idle(self, now: float) -> bool:
        """True when the bucket is full again (it can be forgotten and recreated full)."""
        return self.available(now) >= self.capacity


class _Idle(Protocol):
    def idle(self, now: float) -> bool: ...


T = TypeVar("T", bound=_Idle)


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
                self._items = {k: v for k, v in self._items.items() if not v.idle(now)}
                self._next_prune = max(self.max_keys, 2 * len(self._items))
            item = self._items[key] = self._factory(now)
        return item

    def __len__(self) -> int:
        return len(self._items)
