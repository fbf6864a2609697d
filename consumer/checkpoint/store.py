"""The checkpoint store seam: one item per lease, written only with the current epoch and only forward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from consumer.records import Position

__all__ = ["CheckpointItem", "CheckpointStore"]


@dataclass(frozen=True)
class CheckpointItem:
    """The stored checkpoint of one lease. ``epoch`` mirrors the lease's ownership epoch."""

    stream: str
    shard_id: str
    epoch: int
    position: Position | None
    updated_ms: int = 0


class CheckpointStore(Protocol):
    def get(self, stream: str, shard_id: str) -> CheckpointItem | None: ...

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        """Store ``position`` if ``epoch`` is current and the position does not go back.

        Raises ``CheckpointRejectedError`` (``stale_epoch`` says which condition failed).
        """
        ...
