"""Backends for the repository contract test: the in-memory fakes and DynamoDB on the moto server.

Each backend is a lease repository and a checkpoint store over the same pair of tables, plus the one
backend-specific hook the contract needs: writing a raw checkpoint item, to stage the state a non-atomic
``delete_lease`` can leave behind (the lease item gone, its checkpoint item still there).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.checkpoint.store import CheckpointItem, CheckpointStore
from consumer.dynamo import create_tables, to_item
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem, lease_key
from consumer.leases.repository import LeaseRepository

__all__ = ["Backend", "WallWindow", "dynamodb_backend", "memory_backend"]


@dataclass
class Backend:
    name: str
    repo: LeaseRepository
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
