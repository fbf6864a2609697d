"""The in-memory checkpoint store: DynamoDB's conditional semantics (epoch fence, never backwards)."""

from __future__ import annotations

from dataclasses import replace

from consumer.checkpoint.store import CheckpointItem
from consumer.errors import CheckpointRejectedError
from consumer.leases.memory_tables import InMemoryTables
from consumer.records import Position

__all__ = ["InMemoryCheckpointStore"]


class InMemoryCheckpointStore:
    """Checkpoints in the shared :class:`InMemoryTables`, refused as DynamoDB refuses them."""

    def __init__(self, tables: InMemoryTables) -> None:
        self.t = tables

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        with self.t.lock:
            self.t.calls["GetItem"] += 1
            return self.t.checkpoints.get((stream, shard_id))

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self.t.checkpoints.get((stream, shard_id))
            if cur is None or cur.epoch != epoch:
                raise CheckpointRejectedError(
                    f"{stream}/{shard_id}: epoch {epoch} is not current", stale_epoch=True
                )
            if cur.position is not None and position < cur.position:
                raise CheckpointRejectedError(
                    f"{stream}/{shard_id}: {position} is behind {cur.position}", stale_epoch=False
                )
            self.t.checkpoints[(stream, shard_id)] = replace(
                cur, position=position, updated_ms=self.t.clock.wall_ms()
            )
