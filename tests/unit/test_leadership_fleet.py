"""Leadership with real workers (threads) on the in-memory tables: the leader dies, stalls, or assigns to a
worker that is gone, and members miss their reads. Every record is delivered, and no ownership (shard and
epoch) ever has two workers."""

from __future__ import annotations

import dataclasses
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from consumer.errors import TransientError
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import WorkerItem
from consumer.lifecycle.worker import Worker
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import FAST_LEASES, Journal, make_worker, start, wait_until

# A leader claimed once is this file's promise: leases long enough that a loaded machine's pauses (a second
# or so) do not lapse a live leader's heartbeat and make a second claim.
LEASES = dataclasses.replace(FAST_LEASES, lease_duration=3.0, safety_margin=0.9)
WAIT = 30.0  # a bound for each step, not an expected time


@contextmanager
def stopped_at_exit(*workers: Worker) -> Iterator[None]:
    """Start the workers; stop them however the test ends, so that none outlives it."""
    threads = [start(w) for w in workers]
    try:
        yield
    finally:
        for w in workers:
            w.request_shutdown()
        for t in threads:
            t.join(10)


class Cut:
    """A worker's view of DynamoDB that can be cut (every call refused) or stalled (every call hangs), like
    a network outage or a paused process; ``only`` limits the fault to some calls."""

    def __init__(self, inner: InMemoryLeaseRepository, only: set[str] | None = None) -> None:
        self.inner = inner
        self.only = only
        self.cut = threading.Event()
        self.stalled = threading.Event()
        self.resumed = threading.Event()
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or (self.only is not None and name not in self.only):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.stalled.is_set():
                self.resumed.wait()
            if self.cut.is_set():
                self.refused += 1
                raise TransientError("connection refused")
            return attr(*args, **kwargs)

        return call


def fill(kinesis: InMemoryKinesis, shards: int, per_shard: int, start_at: int = 0) -> int:
    for s in range(shards):
        for i in range(start_at, start_at + per_shard):
            kinesis.put("s", f"shardId-{s:012d}", f"r{s}-{i}".encode())
    return shards * per_shard


def delivered(journal: Journal) -> set[bytes | str]:
    with journal.lock:
        return {(d[1], d[2]) for d in journal.deliveries}  # type: ignore[misc]


def one_worker_per_ownership(journal: Journal) -> None:
    owners: dict[tuple[str, int], set[str]] = defaultdict(set)
    with journal.lock:
        for worker, shard, _seq, _sub, epoch in journal.deliveries:
            owners[(shard, epoch)].add(worker)
    assert all(len(w) == 1 for w in owners.values()), {k: v for k, v in owners.items() if len(v) > 1}


def fleet(
    n: int, tables: InMemoryTables, kinesis: InMemoryKinesis, journal: Journal, **kw: Any
) -> list[Worker]:
    return [
        make_worker(f"w{i}", tables, kinesis, journal, lease=LEASES, **kw.get(f"w{i}", {})) for i in range(n)
    ]


def leader_of(tables: InMemoryTables) -> str | None:
    return tables.leader.owner if tables.leader is not None else None


def test_the_leader_dies_a_follower_takes_over_and_its_leases_move_once() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 6)
    cuts: dict[str, Cut] = {}

    def cut_for(name: str) -> Callable[[InMemoryLeaseRepository], Cut]:
        return lambda repo: cuts.setdefault(name, Cut(repo))

    workers = fleet(
        3, tables, kinesis, journal, **{f"w{i}": {"wrap_repo": cut_for(f"w{i}")} for i in range(3)}
    )
    with stopped_at_exit(*workers):
        total = fill(kinesis, 6, 20)
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "first records")
        old = leader_of(tables)
        assert old is not None
        cuts[old].cut.set()  # the leader is gone for the fleet: no heartbeat, no writes
        total += fill(kinesis, 6, 20, start_at=20)
        wait_until(lambda: leader_of(tables) not in (None, old), WAIT, "a new leader")
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "every record after the leader died")
        # The cut-off leader may deliver some of them itself while its own heartbeat window is still open: its
        # leases move once that closes and the new leader has reassigned them.
        wait_until(
            lambda: all(x.owner not in (None, old) for x in tables.leases.values()),
            WAIT,
            "every lease with a live worker",
        )
        assert tables.leader is not None and tables.leader.epoch == 2  # claimed once
        assert tables.workers[old].generation >= 1  # the claim fenced the dead leader
        one_worker_per_ownership(journal)


def test_a_stalled_leader_is_replaced_and_steps_down_when_it_resumes() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 4)
    cuts: dict[str, Cut] = {}
    workers = fleet(
        2,
        tables,
        kinesis,
        journal,
        **{f"w{i}": {"wrap_repo": lambda r, i=i: cuts.setdefault(f"w{i}", Cut(r))} for i in range(2)},
    )
    with stopped_at_exit(*workers):
        total = fill(kinesis, 4, 10)
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "first records")
        old = leader_of(tables)
        assert old is not None
        cuts[old].stalled.set()  # paused in the middle of a call, as by SIGSTOP
        wait_until(lambda: leader_of(tables) not in (None, old), WAIT, "a new leader")
        new = leader_of(tables)
        cuts[old].stalled.clear()
        cuts[old].resumed.set()
        stale = next(w for w in workers if w.id == old)
        wait_until(lambda: not stale.coordinator.leadership.leading, WAIT, "the stale leader to step down")
        total += fill(kinesis, 4, 10, start_at=10)
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "every record")
        assert leader_of(tables) == new
        one_worker_per_ownership(journal)


def test_a_member_that_cannot_read_its_item_for_a_while_still_gets_its_share() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 4)
    cut: list[Cut] = []
    a = make_worker("a", tables, kinesis, journal, lease=LEASES)
    b = make_worker(
        "b",
        tables,
        kinesis,
        journal,
        lease=LEASES,
        wrap_repo=lambda r: cut.append(Cut(r, {"get_worker", "get_leases"})) or cut[0],
    )
    cut_b = cut[0]
    with stopped_at_exit(a):
        total = fill(kinesis, 4, 10)
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "first records")
        cut_b.cut.set()  # b's reads of its own item and leases are refused while the leader assigns it leases
        with stopped_at_exit(b):
            wait_until(lambda: any(w.given for w in tables.workers.values()), WAIT, "a lease given to b")
            wait_until(lambda: cut_b.refused >= 5, WAIT, "b's reads refused")
            assert not b.owned
            cut_b.cut.clear()
            wait_until(lambda: len(b.owned) == 2, WAIT, "b to start the leases it missed")
            total += fill(kinesis, 4, 10, start_at=10)
            wait_until(lambda: len(delivered(journal)) == total, WAIT, "every record")
            one_worker_per_ownership(journal)


def test_leases_assigned_to_a_worker_that_just_died_go_to_a_live_one_a_lease_later() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 4)
    # A worker that registered and died at once: its item looks fresh, its heartbeat never moves.
    InMemoryLeaseRepository(tables).register_worker(
        WorkerItem("ghost", started_ms=tables.clock.wall_ms(), streams=frozenset({"s"}))
    )
    a = make_worker("a", tables, kinesis, journal, lease=LEASES)
    with stopped_at_exit(a):
        total = fill(kinesis, 4, 10)
        wait_until(
            lambda: any(x.owner == "ghost" for x in tables.leases.values()), WAIT, "an assignment to ghost"
        )
        wait_until(lambda: len(delivered(journal)) == total, WAIT, "every record, by the live worker")
        assert all(x.owner == "a" for x in tables.leases.values())
        one_worker_per_ownership(journal)
