"""Time as a seam: every lease decision reads a monotonic clock that tests can replace."""

from __future__ import annotations

import threading
import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """Monotonic seconds (never wall time) and wall-clock milliseconds for display only."""

    def monotonic(self) -> float: ...

    def wall_ms(self) -> int: ...


class SystemClock:
    """The process's own monotonic clock; it keeps running while the process is stopped (SIGSTOP)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall_ms(self) -> int:
        return int(self.monotonic() * 1000)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
