"""The shell carries out what the machine decides: a processor that holds its records (marks them done later,
from another thread) keeps a manual-mode checkpoint where the done records end, while auto mode saves each
delivered batch; a requested stop then drains to what is done."""

from __future__ import annotations

import queue
import threading
from typing import Literal

import pytest

from consumer.config import CheckpointConfig, RetrievalConfig
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput, ShutdownReason
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.records import Position, Record
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import lone_shard_consumer, wait_until


class Holding(BaseProcessor):
    """Keeps every record it is given; ``held`` is read (and its records marked done) by the test."""

    def __init__(self) -> None:
        self.held: queue.Queue[Record] = queue.Queue()

    def process_records(self, data: ProcessRecordsInput) -> None:
        for record in data.records:
            self.held.put(record)


def _run(mode: Literal["auto", "manual"]) -> tuple[ShardConsumer, Holding, InMemoryTables, list[str], str]:
    kinesis, processor = InMemoryKinesis(), Holding()
    retrieval = RetrievalConfig(idle_time_between_reads=0.05, initial_position="TRIM_HORIZON")
    consumer, _, tables, shard = lone_shard_consumer(
        kinesis, lambda: processor, retrieval, checkpoint=CheckpointConfig(mode=mode)
    )
    sequences = [kinesis.put("s", shard, f"r{i}".encode()) for i in range(3)]
    consumer.start()
    return consumer, processor, tables, sequences, shard


def _saved(tables: InMemoryTables, shard: str) -> Position | None:
    return tables.checkpoints[("s", shard)].position


@pytest.mark.parametrize("mode", ["auto", "manual"])
def test_manual_mode_saves_only_what_is_done_where_auto_saves_what_was_delivered(
    mode: Literal["auto", "manual"],
) -> None:
    consumer, processor, tables, sequences, shard = _run(mode)
    records = [processor.held.get(timeout=5) for _ in sequences]
    if mode == "auto":
        wait_until(lambda: _saved(tables, shard) == records[-1].position, what="the delivered batch saved")
    else:
        consumer.join(0.3)  # a few idle polls: nothing is done, so nothing may be saved
        assert _saved(tables, shard) is None
        threading.Thread(target=records[0].done).start()  # done later, from another thread
        wait_until(lambda: _saved(tables, shard) == records[0].position, what="the done record saved")
        records[1].done()  # records[2] stays held: the drain saves up to what is done
    consumer.stop(ShutdownReason.REQUESTED)
    consumer.join(5)
    assert consumer.finished
    expected = records[-1] if mode == "auto" else records[1]
    assert _saved(tables, shard) == expected.position
