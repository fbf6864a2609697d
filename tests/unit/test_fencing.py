"""A worker cut off from DynamoDB past its lease: it stops on its own, loses the lease, cannot checkpoint."""

from __future__ import annotations

import threading
import time

import pytest

from consumer.checkpoint.store import CheckpointItem
from consumer.clock import FakeClock
from consumer.errors import (
    CheckpointRejectedError,
    LeaseConflictError,
    LeaseLostError,
    UnreachableError,
    WorkerFencedError,
)
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import OwnerObservation
from consumer.lifecycle.guard import ShardGuard
from consumer.records import Position
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import PROCESSOR_KINDS, Journal, make_worker, start, wait_until


class Partition:
    """Wraps a repository; while ``cut`` is set every call fails like an unreachable endpoint."""

    def __init__(self, inner: InMemoryLeaseRepository) -> None:
        self.inner = inner
        self.cut = threading.Event()

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)

        def call(*args, **kwargs):
            if self.cut.is_set():
                raise UnreachableError("cannot reach DynamoDB: endpoint unreachable")
            return attr(*args, **kwargs)

        return call


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_cut_off_worker_stops_delivering_and_is_fenced(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = "shardId-000000000000"
    partitions: list[Partition] = []
    a = make_worker(
        "a",
        tables,
        kinesis,
        journal,
        wrap_repo=lambda r: partitions.append(Partition(r)) or partitions[-1],
        kind=kind,
    )
    wrapped = partitions[0]
    ta = start(a)
    wait_until(
        lambda: tables.leases.get(("s", shard)) is not None and tables.leases[("s", shard)].owner == "a"
    )
    old_epoch = tables.leases[("s", shard)].epoch
    b = make_worker("b", tables, kinesis, journal, kind=kind)
    tb = start(b)
    wrapped.cut.set()
    cut_at = time.monotonic()
    wait_until(lambda: not a.validity.valid(), timeout=3, what="a's validity to lapse")
    lapsed_after = time.monotonic() - cut_at
    # The owner's window (lease_duration - margin = 0.7 s) closes before anyone may take over (1.0 s).
    assert lapsed_after < a.config.lease.lease_duration
    kinesis.put("s", shard, b"during-partition")
    wait_until(lambda: tables.leases[("s", shard)].owner == "b", timeout=5, what="b takes over")
    wait_until(lambda: len(journal.deliveries) == 1)
    assert journal.deliveries[0][0] == "b"  # a never delivered while it could not prove ownership
    # a's late checkpoint with its old epoch is rejected by the store.
    with pytest.raises(CheckpointRejectedError) as info:
        InMemoryCheckpointStore(tables).save("s", shard, old_epoch, Position("999999999999999999999999"))
    assert info.value.stale_epoch
    wrapped.cut.clear()
    wait_until(lambda: ("a", shard, "lease_lost") in journal.events, what="a told lease_lost")
    assert not a.owned
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(5)


def test_take_from_dead_owner_fences_its_next_heartbeat() -> None:
    tables = InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    repo.register_worker(WorkerItem("dead"))
    repo.register_worker(WorkerItem("b"))
    repo.create_lease(Lease("s", "sh"))
    owned = repo.take(Lease("s", "sh"), "dead", None)
    hb = repo.heartbeat("dead", 0, 1, False)
    with pytest.raises(LeaseConflictError):  # its heartbeat moved since we looked: not dead after all
        repo.take(owned, "b", OwnerObservation("dead", hb - 1))
    stolen = repo.take(owned, "b", OwnerObservation("dead", hb))
    assert stolen.epoch == owned.epoch + 1
    assert tables.checkpoints[("s", "sh")] == CheckpointItem("s", "sh", stolen.epoch, None)
    with pytest.raises(WorkerFencedError):
        repo.heartbeat("dead", 0, 1, False)


def test_checkpoint_never_moves_back() -> None:
    tables = InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    store = InMemoryCheckpointStore(tables)
    repo.create_lease(Lease("s", "sh"))
    lease = repo.take(Lease("s", "sh"), "a", None)
    store.save("s", "sh", lease.epoch, Position("200", 3))
    store.save("s", "sh", lease.epoch, Position("200", 3))  # same position: fine
    with pytest.raises(CheckpointRejectedError) as info:
        store.save("s", "sh", lease.epoch, Position("200", 2))
    assert not info.value.stale_epoch


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_a_lapse_without_a_taker_suspends_and_resumes_the_same_ownership(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = "shardId-000000000000"
    partitions: list[Partition] = []
    a = make_worker(
        "a",
        tables,
        kinesis,
        journal,
        wrap_repo=lambda r: partitions.append(Partition(r)) or partitions[-1],
        kind=kind,
    )
    wrapped = partitions[0]
    ta = start(a)
    wait_until(lambda: bool(a.owned) and a.validity.valid())
    epoch = tables.leases[("s", shard)].epoch
    wrapped.cut.set()
    wait_until(lambda: not a.validity.valid(), timeout=3)
    seqs = [kinesis.put("s", shard, f"cut{i}".encode()) for i in range(5)]
    time.sleep(0.3)
    assert not journal.deliveries  # nothing delivered while the window is closed
    wrapped.cut.clear()
    wait_until(lambda: len(journal.deliveries) == 5, what="delivery resumes after the heartbeat")
    a.request_shutdown()
    ta.join(5)
    assert journal.sequences(shard) == seqs
    assert {d[4] for d in journal.deliveries} == {epoch}  # the same ownership throughout
    assert [e for _, _, e in journal.events if e == "lease_lost"] == []
    assert len([e for _, _, e in journal.events if e.startswith("init")]) == 1


def test_a_guard_is_invalid_once_its_ownership_ends_and_says_so_unlike_a_lost_lease() -> None:
    clock = FakeClock()
    validity = OwnValidity(clock, window=10.0)
    validity.extend(clock.monotonic())
    ended, lost = ShardGuard(3, validity), ShardGuard(3, validity)
    assert ended.is_valid() and ended.remaining() == 10.0
    ended.mark_ended()  # handed over, released, ended or halted: the worker's window is still open
    assert not ended.is_valid() and ended.remaining() == 0.0
    with pytest.raises(LeaseLostError, match=r"this ownership has ended \(epoch 3\)"):
        ended.ensure_valid()
    lost.mark_lost()
    lost.mark_ended()  # the consumer ends after the loss: the loss is what it says
    with pytest.raises(LeaseLostError, match=r"^lease lost \(epoch 3\)$"):
        lost.ensure_valid()
