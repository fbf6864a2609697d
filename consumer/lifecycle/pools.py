"""The bounded thread pools the shard runner hands its blocking work to.

``Pool`` is the seam (``submit`` a job; it runs some time later on some thread); ``GrowingPool`` is the real
one: it starts a thread only when every thread it has is busy, up to ``limit``, so a worker with fast
processors keeps a handful of threads whatever its shard count, and one with slow processors grows to the
bound and no further (jobs then wait their turn, in order). Threads are daemons: a processor call that never
returns does not keep the process alive once the worker has stopped.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

__all__ = ["GrowingPool", "Job", "Pool"]

logger = logging.getLogger(__name__)

Job = Callable[[], None]


class Pool(Protocol):
    """Runs jobs on threads of its own (a test's pool runs them when the test says)."""

    def submit(self, job: Job) -> None:
        """Run ``job`` soon, on a pool thread; it must not raise (the runner's jobs report their errors)."""
        ...

    def close(self) -> None:
        """No job starts after this; idle threads end (busy ones end after their job)."""
        ...


class GrowingPool:
    """Up to ``limit`` daemon threads named ``<name>-<n>``, started one at a time as the work needs them."""

    def __init__(self, name: str, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._name = name
        self._limit = limit
        self._cond = threading.Condition(threading.Lock())
        self._jobs: deque[Job] = deque()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far (never more than ``limit``)."""
        with self._cond:
            return len(self._threads)

    @property
    def busy(self) -> int:
        """Threads running a job now."""
        with self._cond:
            return len(self._threads) - self._idle

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                return
            self._jobs.append(job)
            if self._idle > len(self._jobs) - 1:
                self._cond.notify()
                return
            if len(self._threads) < self._limit:
                thread = threading.Thread(
                    target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` in all for the threads to end after ``close``; whether they all did."""
        with self._cond:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)  # a blocked processor call is let go: its thread is a daemon
            timeout = 0.0 if thread.is_alive() else timeout
        return not any(t.is_alive() for t in threads)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if self._closed:
                    return
                job = self._jobs.popleft()
            try:
                job()
            except Exception:  # a job of the runner reports its own errors: this is a bug worth seeing
                logger.exception("pool job failed", extra={"event": "pool_job_failed", "pool": self._name})
