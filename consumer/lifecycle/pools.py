"""The bounded thread pools the shard runner hands its blocking work to.

``Pool`` is the seam (``submit`` a job; it runs some time later on some thread); ``GrowingPool`` is the real
one: past a small core it starts a thread only when a job has waited for one, up to ``limit``, so a worker
with fast processors keeps a handful of threads whatever its shard count, and one with slow or blocked
processors grows to the bound and no further (jobs then wait their turn, in order). Threads are daemons: a processor call that never
returns does not keep the process alive once the worker has stopped.
"""

from __future__ import annotations

import logging
import threading
import time
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

    def relieve(self) -> None:
        """Look again whether a job waits too long for a thread (the scheduler calls it now and then)."""
        ...

    def close(self) -> None:
        """No job starts after this; idle threads end (busy ones end after their job)."""
        ...


class GrowingPool:
    """Up to ``limit`` daemon threads named ``<name>-<n>``. ``core`` threads start as jobs come; past them a
    thread starts only when a job has waited ``grow_after`` seconds for one (seen at the next ``submit`` or
    ``relieve``), so a burst of quick jobs (every shard's setup at start) does not start a thread each, while
    jobs stuck behind blocked ones still get a thread soon. A thread beyond ``core`` idle for ``idle_exit``
    seconds ends."""

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        core: int = 4,
        grow_after: float = 0.05,
        idle_exit: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._name = name
        self._limit = limit
        self._core = min(core, limit)
        self._grow_after = grow_after
        self._idle_exit = idle_exit
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._jobs: deque[tuple[float, Job]] = deque()
        self._threads: set[threading.Thread] = set()
        self._started = 0
        self._idle = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads running now (never more than ``limit``)."""
        with self._cond:
            return len(self._threads)

    def submit(self, job: Job) -> None:
        with self._cond:
            if self._closed:
                return
            self._jobs.append((self._clock(), job))
            if self._idle >= len(self._jobs):
                self._cond.notify()
            elif len(self._threads) < self._core:
                self._spawn()
            else:
                self._cond.notify()
                self._relieve()

    def relieve(self) -> None:
        """Start a thread if the oldest job has waited ``grow_after`` for one (called now and then)."""
        with self._cond:
            if not self._closed:
                self._relieve()

    def _relieve(self) -> None:
        waiting = self._jobs and self._idle < len(self._jobs) and len(self._threads) < self._limit
        if waiting and self._clock() - self._jobs[0][0] >= self._grow_after:
            self._spawn()

    def _spawn(self) -> None:
        thread = threading.Thread(target=self._run, name=f"{self._name}-{self._started}", daemon=True)
        self._started += 1
        self._threads.add(thread)
        thread.start()

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
        me = threading.current_thread()
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._idle += 1
                    woken = self._cond.wait(self._idle_exit)
                    self._idle -= 1
                    if not woken and not self._jobs and len(self._threads) > self._core:
                        self._threads.discard(me)  # idle for long: the pool shrinks back to its core
                        return
                if self._closed:
                    self._threads.discard(me)
                    return
                _, job = self._jobs.popleft()
            try:
                job()
            except BaseException:  # a job reports its own errors: this is a bug worth seeing. Whatever it
                # was (also SystemExit or CancelledError, which would end the thread silently or with a bare
                # stderr print while the pool still counted it), the thread goes on taking jobs.
                logger.exception("pool job failed", extra={"event": "pool_job_failed", "pool": self._name})
