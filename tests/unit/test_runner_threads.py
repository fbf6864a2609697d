"""A worker's threads are bounded by its settings, not by the shards it owns; its shutdown's releases due
together go out in one write.

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


class _CountedReleases:
    """A lease repository that counts how its releases are asked for."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.one_by_one = 0
        self.together: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def release(self, lease: Any, given_up: bool = False) -> Any:
        self.one_by_one += 1
        return self._inner.release(lease, given_up)

    def release_all(self, leases: Any) -> Any:
        self.together.append(len(leases))
        return self._inner.release_all(leases)


def test_a_shutdown_releases_every_lease_once_those_due_together_in_one_write() -> None:
    kinesis, tables, journal = InMemoryKinesis(), InMemoryTables(), Journal()
    kinesis.create_stream("s", 8)
    counted: list[_CountedReleases] = []

    def wrap(repo: Any) -> _CountedReleases:
        counted.append(_CountedReleases(repo))
        return counted[0]

    worker = make_worker("w1", tables, kinesis, journal, wrap_repo=wrap)
    thread = start(worker)
    try:
        wait_until(lambda: len(worker.owned) == 8, timeout=30, what="every lease owned")
    finally:
        worker.request_shutdown()
        thread.join(15)
    assert not thread.is_alive()
    # Every lease released once; those whose shards finished draining in the same step went out together
    # (how many finish per step is the scheduler's: tests/unit/test_handoff_writes.py holds the batching).
    assert sum(counted[0].together) + counted[0].one_by_one == 8
    assert all(n >= 2 for n in counted[0].together)
    assert all(lease.owner is None for lease in tables.leases.values())
