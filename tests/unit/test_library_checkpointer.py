"""The checkpointer a processor is handed: ``checkpoint(record)`` with a record of another shard (a buffer shared
by a worker's shards and flushed by whichever fills it) would write a sequence number that means nothing in
this shard, and skip or replay its records. It is refused, naming both shards, and nothing is written."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from consumer import SHARD_END, Position, Record
from consumer.checkpoint.checkpointer import CheckpointWriter
from consumer.checkpoint.store import CheckpointItem
from consumer.errors import LeaseLostError


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


def test_positions_the_processor_was_not_given_are_refused_and_nothing_is_written() -> None:
    store = Store()
    writer = CheckpointWriter(store, "orders", "shardId-000000000001", Guard(), Position("100"), lambda: None)
    checkpointer = writer.view(lambda: None)
    with pytest.raises(ValueError, match=r"past the last record handed to the processor \(100/0\)"):
        checkpointer.checkpoint(Position("101"))  # nothing handed yet: the start is the furthest
    writer.hand(Position("300", 2))
    writer.hand(Position("200"))  # a record of the batch again (one at a time): the furthest stays
    for bad, error, words in (
        (SHARD_END, ValueError, "outside shard_ended"),
        (Position("300", 3), ValueError, "past the last record handed"),
        (Position("9" * 56), ValueError, "past the last record handed"),
        (Position("3e2"), ValueError, "is not a sequence number"),
        ("300", TypeError, "Position(sequence_number)"),
        (300, TypeError, "got int 300"),
    ):
        with pytest.raises(error) as caught:
            checkpointer.checkpoint(bad)  # type: ignore[arg-type]
        assert words in str(caught.value)
    assert store.saved == []
    checkpointer.checkpoint(Position("300", 2))
    writer.view(lambda: None, at_end=True).checkpoint(SHARD_END)  # shard_ended's own checkpointer
    assert [s[3] for s in store.saved] == [Position("300", 2), SHARD_END]


class Ended(Guard):
    def is_valid(self) -> bool:
        return False

    def ensure_valid(self) -> None:
        raise LeaseLostError("this ownership has ended (epoch 4)")


def test_once_the_ownership_is_over_both_checkpoints_raise_lease_lost_even_for_the_stored_position() -> None:
    store = Store()
    writer = CheckpointWriter(store, "orders", "shardId-000000000001", Ended(), Position("100"), lambda: None)
    checkpointer = writer.view(lambda: None)
    with pytest.raises(LeaseLostError):
        checkpointer.checkpoint(Position("100"))
    with pytest.raises(LeaseLostError):
        asyncio.run(checkpointer.acheckpoint(Position("100")))
    with pytest.raises(ValueError):  # refused for what it is first, as checkpoint() does
        asyncio.run(checkpointer.acheckpoint(SHARD_END))
    assert store.saved == []
