"""The checkpointer a processor is handed: ``checkpoint(record)`` with a record of another shard (a buffer shared
by a worker's shards and flushed by whichever fills it) would write a sequence number that means nothing in
this shard, and skip or replay its records. It is refused, naming both shards, and nothing is written."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from consumer import Position, Record
from consumer.checkpoint.checkpointer import CheckpointWriter
from consumer.checkpoint.store import CheckpointItem


class Guard:
    epoch = 4

    def is_valid(self) -> bool:
        return True

    def ensure_valid(self) -> None:
        return None


class Store:
    def __init__(self) -> None:
        self.saved: list[tuple[str, str, int, Position]] = []

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        return None

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        self.saved.append((stream, shard_id, epoch, position))


def record(stream: str, shard_id: str, sequence: str) -> Record:
    return Record(stream, shard_id, sequence, 0, "pk", b"{}", datetime.now(UTC))


def test_a_record_of_another_shard_or_stream_is_refused_and_nothing_is_written() -> None:
    store = Store()
    writer = CheckpointWriter(store, "orders", "shardId-000000000001", Guard(), None, lambda: None)
    checkpointer = writer.view(lambda: None)
    for other in (
        record("orders", "shardId-000000000002", "900"),
        record("returns", "shardId-000000000001", "900"),
    ):
        with pytest.raises(ValueError) as caught:
            checkpointer.checkpoint(other)
        assert f"checkpoint({other.stream}/{other.shard_id} record 900/0)" in str(caught.value)
        assert "on the checkpointer of orders/shardId-000000000001" in str(caught.value)
    assert store.saved == []
    checkpointer.checkpoint(record("orders", "shardId-000000000001", "700"))
    assert store.saved == [("orders", "shardId-000000000001", 4, Position("700"))]
    assert checkpointer.last_checkpoint == Position("700")
