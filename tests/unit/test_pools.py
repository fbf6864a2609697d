"""The growing pool: a small core for quick jobs, more threads only for jobs that wait, never past the bound."""

from __future__ import annotations

import threading

from consumer.clock import FakeClock
from consumer.lifecycle.pools import GrowingPool
from tests.unit.helpers import wait_until


def test_a_burst_of_quick_jobs_runs_on_the_core_and_blocked_ones_grow_the_pool_to_its_bound() -> None:
    clock, gate, done = FakeClock(), threading.Event(), []
    pool = GrowingPool("t", 4, core=1, grow_after=0.05, clock=clock.monotonic)
    try:
        for i in range(50):  # a burst at start (every shard's setup)
            pool.submit(lambda i=i: done.append(i))
        wait_until(lambda: len(done) == 50, what="the burst ran")
        assert pool.threads == 1 and done == list(range(50))  # on the core, in order

        def blocked() -> None:
            gate.wait(10)
            done.append(-1)

        for _ in range(6):
            pool.submit(blocked)
        assert pool.threads == 1  # the next jobs have not waited yet
        clock.advance(0.06)
        for _ in range(5):
            pool.relieve()  # each look starts one thread for the jobs still waiting, up to the bound
        assert pool.threads == 4
        gate.set()
        wait_until(lambda: done.count(-1) == 6, what="the blocked jobs ended")
    finally:
        gate.set()
        pool.close()
        assert pool.join(5)
