"""Backends and shared cases for the repository contract test: the in-memory fakes and DynamoDB on moto.

Each backend is a lease repository and a checkpoint store over the same pair of tables, plus the one
backend-specific hook the contract needs: writing a raw checkpoint item, to stage the state a non-atomic
``delete_lease`` can leave behind (the lease item gone, its checkpoint item still there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.checkpoint.store import CheckpointItem, CheckpointStore
from consumer.dynamo import create_tables, to_item
from consumer.errors import LeaseConflictError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem, lease_key
from consumer.records import Position

__all__ = [
    "CONFLICTS",
    "KEEPING_THE_OWNER",
    "OWNERSHIP_CHANGES",
    "P1",
    "P2",
    "P3",
    "Backend",
    "WallWindow",
    "b",
    "dynamodb_backend",
    "in_step",
    "memory_backend",
    "refused",
    "stale_view",
    "state",
]

# Real Kinesis sequence numbers are 56 digits (the store tests add shorter ones for the numeric order).
P1, P2, P3 = (Position(f"4959033827149025660855969253836157109592157598913658889{i}") for i in (1, 2, 3))


@dataclass
class Backend:
    name: str
    repo: InMemoryLeaseRepository | DynamoDBLeaseRepository  # every role, and ``take`` to stage ownership
    store: CheckpointStore
    put_raw_checkpoint: Callable[[str, str, int], None]  # (stream, shard_id, epoch), no position

    # -- reads used by the assertions --------------------------------------------------------------
    def lease(self, stream: str, shard_id: str) -> Lease | None:
        """The stored lease, as a fresh (strongly consistent) snapshot shows it."""
        found = [x for x in self.repo.snapshot().leases if (x.stream, x.shard_id) == (stream, shard_id)]
        assert len(found) <= 1, found
        return found[0] if found else None

    def stored(self, lease: Lease) -> Lease:
        current = self.lease(lease.stream, lease.shard_id)
        assert current is not None, f"{lease.key} is gone"
        return current

    def worker(self, worker_id: str) -> WorkerItem:
        item = self.repo.get_worker(worker_id)
        assert item is not None, f"worker {worker_id} is not registered"
        return item

    def checkpoint(self, lease: Lease) -> CheckpointItem | None:
        return self.store.get(lease.stream, lease.shard_id)

    def owned(self, shard_id: str, owner: str, stream: str = "s") -> Lease:
        """A fresh lease taken by ``owner`` (registered here if it is not yet)."""
        if self.repo.get_worker(owner) is None:
            self.repo.register_worker(WorkerItem(owner))
        assert self.repo.create_lease(Lease(stream, shard_id))
        return self.repo.take(Lease(stream, shard_id), owner, None)


def memory_backend() -> Backend:
    tables = InMemoryTables()

    def put_raw(stream: str, shard_id: str, epoch: int) -> None:
        with tables.lock:
            tables.checkpoints[(stream, shard_id)] = CheckpointItem(stream, shard_id, epoch, None)

    return Backend("memory", InMemoryLeaseRepository(tables), InMemoryCheckpointStore(tables), put_raw)


def dynamodb_backend(client: Any, lease_table: str, checkpoint_table: str) -> Backend:
    create_tables(client, lease_table, checkpoint_table)

    def put_raw(stream: str, shard_id: str, epoch: int) -> None:
        client.put_item(
            TableName=checkpoint_table,
            Item=to_item(
                {
                    "lease_key": lease_key(stream, shard_id),
                    "stream": stream,
                    "shard_id": shard_id,
                    "epoch": epoch,
                }
            ),
        )

    return Backend(
        "dynamodb",
        DynamoDBLeaseRepository(client, lease_table, checkpoint_table),
        DynamoDBCheckpointStore(client, checkpoint_table),
        put_raw,
    )


class WallWindow:
    """Wall-clock milliseconds around an action, to check the operator-facing timestamps it writes."""

    def __enter__(self) -> WallWindow:
        self.start_ms = int(time.time() * 1000)
        return self

    def __exit__(self, *exc: object) -> None:
        self.end_ms = int(time.time() * 1000)

    def __contains__(self, ms: object) -> bool:
        return isinstance(ms, int) and self.start_ms <= ms <= self.end_ms


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.integration)])
def b(request: pytest.FixtureRequest, unique_name: Callable[..., str]) -> Backend:
    """The backend a contract case runs on: the in-memory fakes, then DynamoDB on moto over HTTP."""
    if request.param == "memory":
        return memory_backend()
    client = request.getfixturevalue("dynamodb_client")
    return dynamodb_backend(client, unique_name("leases"), unique_name("cps"))


# -- assertions ---------------------------------------------------------------------------------------
def state(b: Backend, *leases: Lease) -> tuple[Any, ...]:
    snap = b.repo.snapshot()
    return (
        sorted(snap.leases, key=lambda x: x.key),
        sorted(snap.workers, key=lambda w: (w.worker_id, w.heartbeat, w.generation, w.inbox)),
        [b.checkpoint(x) for x in leases],
    )


def refused(b: Backend, action: Callable[[], object], *leases: Lease) -> None:
    """``action`` raises ``LeaseConflictError`` and changes nothing in either table."""
    before = state(b, *leases)
    with pytest.raises(LeaseConflictError):
        action()
    assert state(b, *leases) == before


def in_step(b: Backend, lease: Lease) -> CheckpointItem:
    """The cross-table invariant: the checkpoint item's epoch is the lease's epoch."""
    checkpoint = b.checkpoint(lease)
    assert checkpoint is not None
    assert checkpoint.epoch == b.stored(lease).epoch
    return checkpoint


def stale_view(b: Backend) -> Lease:
    """An owner's view from before its lease was released and taken back (same owner, older epoch)."""
    first = b.owned("sh", "w1")
    b.repo.take(b.repo.release(first), "w1", None)
    return first


OWNERSHIP_CHANGES: dict[str, Callable[[Backend, Lease], Lease]] = {
    "take": lambda b, lease: b.repo.take(lease, "w2", None),
    "transfer": lambda b, lease: b.repo.transfer(lease, "w2"),
    "assign": lambda b, lease: b.repo.assign(lease, "w2", None),
    "release": lambda b, lease: b.repo.release(lease),
    "reset_checkpoint": lambda b, lease: b.repo.reset_checkpoint(lease, P1),
}


def _wrong_owner(b: Backend) -> Lease:
    b.repo.register_worker(WorkerItem("w3"))
    return replace(b.owned("sh", "w1"), owner="w3")


def _ended(b: Backend) -> Lease:
    return b.repo.mark_ended(b.owned("sh", "w1"))


def _absent(b: Backend) -> Lease:
    return replace(b.owned("sh", "w1"), shard_id="never-created")


def _leftover_checkpoint(b: Backend) -> Lease:
    """A lease created over a checkpoint item of another epoch (a ``delete_lease`` that stopped halfway)."""
    b.repo.register_worker(WorkerItem("w1"))
    b.put_raw_checkpoint("s", "sh", 7)
    b.repo.create_lease(Lease("s", "sh"))
    return b.stored(Lease("s", "sh"))


CONFLICTS: dict[str, Callable[[Backend], Lease]] = {
    "stale-epoch": stale_view,
    "wrong-owner": _wrong_owner,
    "ended": _ended,
    "absent": _absent,
    "leftover-checkpoint": _leftover_checkpoint,
}


KEEPING_THE_OWNER: dict[str, Callable[[Backend, Lease], Lease]] = {
    "request_handoff": lambda b, lease: b.repo.request_handoff(lease, "w2", 1234),
    "clear_handoff": lambda b, lease: b.repo.clear_handoff(lease),
    "mark_ended": lambda b, lease: b.repo.mark_ended(lease),
    "mark_halted": lambda b, lease: b.repo.mark_halted(lease, "495903/0", 5000),
}
