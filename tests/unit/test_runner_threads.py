"""A worker's threads are bounded by its settings, not by the shards it owns; its shutdown's lease writes go
out at once.

One worker on the in-memory backends owns 4, then 32 shards, every one of them read and delivered; its
threads (beyond those the test process had before) stay within the fixed few (the coordinator's caller, the
heartbeat and background lanes, the runner's scheduler) plus the two configured pools, at both counts.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from consumer.config import ThreadsConfig
from consumer.leases.memory import InMemoryTables
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, make_worker, start, wait_until

FETCH, PROCESSORS = 2, 3
FIXED = 5  # run() on the test's thread, heartbeat lane, background lane, runner scheduler, one spare


def _threads_while_consuming(shards: int) -> int:
    kinesis, tables, journal = InMemoryKinesis(), InMemoryTables(), Journal()
    kinesis.create_stream("s", shards)
    for shard in kinesis.list_shards("s"):
        for i in range(3):
            kinesis.put("s", shard.shard_id, f"{i}".encode())
    before = threading.active_count()
    name = f"w{shards}"
    worker = make_worker(name, tables, kinesis, journal, threads=ThreadsConfig(FETCH, PROCESSORS))
    thread = start(worker)
    try:
        wait_until(lambda: len(journal.deliveries) == 3 * shards, timeout=30, what="every record delivered")
        return threading.active_count() - before
    finally:
        worker.request_shutdown()
        thread.join(10)
        # Its threads end after it (the pools' daemons once closed): the next count starts from the same place.
        wait_until(lambda: not [t for t in threading.enumerate() if name in t.name], what="the threads gone")


@pytest.mark.parametrize("shards", [4, 32])
def test_a_worker_runs_no_more_threads_than_its_pools_allow(shards: int) -> None:
    grown = _threads_while_consuming(shards)
    assert grown <= FIXED + FETCH + PROCESSORS, f"{grown} threads for {shards} shards"


def test_eight_times_the_shards_take_no_more_threads() -> None:
    assert _threads_while_consuming(32) <= _threads_while_consuming(4) + 1


class _HeldReleases:
    """A lease repository whose releases each wait (at most a moment) for another to be under way at once."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        self.in_flight = 0
        self.most = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def release(self, lease: Any, given_up: bool = False) -> Any:
        with self._joined:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self._joined.notify_all()
            self._joined.wait_for(lambda: self.in_flight > 1, timeout=0.5)
        try:
            return self._inner.release(lease, given_up)
        finally:
            with self._lock:
                self.in_flight -= 1


def test_a_shutdown_releases_its_leases_at_once_not_one_after_another() -> None:
    kinesis, tables, journal = InMemoryKinesis(), InMemoryTables(), Journal()
    kinesis.create_stream("s", 8)
    held: list[_HeldReleases] = []

    def wrap(repo: Any) -> _HeldReleases:
        held.append(_HeldReleases(repo))
        return held[0]

    worker = make_worker("w1", tables, kinesis, journal, wrap_repo=wrap)
    thread = start(worker)
    try:
        wait_until(lambda: len(worker.owned) == 8, timeout=30, what="every lease owned")
    finally:
        worker.request_shutdown()
        thread.join(15)
    assert not thread.is_alive()
    assert held[0].most >= 2, "the releases went out one after another"
    assert all(lease.owner is None for lease in tables.leases.values())
