"""Where a shard without a checkpoint starts: a child shard (one with parents) keeps ``AT_TIMESTAMP`` with the
configured timestamp; only under ``LATEST`` does it start at ``TRIM_HORIZON`` (docs/protocol.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.checkpoint.store import CheckpointItem
from consumer.clock import SystemClock
from consumer.config import (
    CheckpointConfig,
    LeaseConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryTables
from consumer.leases.model import Lease
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.lifecycle.shard_start import ConsumerContext, Started, initial_position, start_shard
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.memory import InMemoryKinesis

T = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("configured", "parents", "expected"),
    [
        ("TRIM_HORIZON", (), "TRIM_HORIZON"),
        ("TRIM_HORIZON", ("p",), "TRIM_HORIZON"),
        ("LATEST", (), "LATEST"),
        ("LATEST", ("p",), "TRIM_HORIZON"),  # unchanged: the parents were read up to their end
        ("AT_TIMESTAMP", (), "AT_TIMESTAMP"),
        ("AT_TIMESTAMP", ("p",), "AT_TIMESTAMP"),
        ("AT_TIMESTAMP", ("p", "q"), "AT_TIMESTAMP"),  # a merge's child
    ],
)
def test_initial_position_of_a_shard_by_its_parents(
    configured: str, parents: tuple[str, ...], expected: str
) -> None:
    assert initial_position(Lease("s", "c", parents=parents), configured) == expected


class _Recorder(BaseProcessor):
    def __init__(self, seen: list[InitializationInput]) -> None:
        self.seen = seen

    def initialize(self, data: InitializationInput) -> None:
        self.seen.append(data)

    def process_records(self, data: ProcessRecordsInput) -> None:  # never called here
        raise AssertionError("no records are read by start_shard")


def _start(retrieval: RetrievalConfig, parents: tuple[str, ...]) -> tuple[Started, InitializationInput]:
    seen: list[InitializationInput] = []
    tables = InMemoryTables()
    tables.checkpoints[("s", "child")] = CheckpointItem("s", "child", 1, None)  # no checkpoint yet
    config = WorkerConfig(
        application="app",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id="w1",
        streams=(StreamSpec("s", lambda: _Recorder(seen)),),
        lease=LeaseConfig(),
        retrieval=retrieval,
        checkpoint=CheckpointConfig(),
        shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
    )
    clock = SystemClock()
    validity = OwnValidity(clock, 60.0)
    validity.extend(clock.monotonic())
    reports: list[Any] = []
    ctx = ConsumerContext(
        config,
        InMemoryKinesis(),
        InMemoryCheckpointStore(tables),
        None,
        InMemoryMetrics(),
        validity,
        clock,
        reports.append,
    )
    lease = Lease("s", "child", "w1", 1, parents=parents)
    started = start_shard(lease, config.streams[0], ctx, ShardGuard(1, validity))
    assert isinstance(started, Started), started
    assert len(seen) == 1
    return started, seen[0]


def test_a_child_shard_starts_at_the_configured_timestamp_under_at_timestamp() -> None:
    """Before: a child always started at TRIM_HORIZON, so a new application asking for AT_TIMESTAMP got the
    whole retained history of every shard born of a reshard before it started."""
    retrieval = RetrievalConfig(initial_position="AT_TIMESTAMP", initial_timestamp=T)
    started, init = _start(retrieval, parents=("shardId-000000000000",))
    assert started.initial == "AT_TIMESTAMP" and started.start is None
    assert init.initial_position == "AT_TIMESTAMP" and init.starting_position is None


def test_a_child_shard_still_starts_at_trim_horizon_under_latest() -> None:
    started, init = _start(RetrievalConfig(initial_position="LATEST"), parents=("shardId-000000000000",))
    assert started.initial == init.initial_position == "TRIM_HORIZON"


def test_a_shard_without_parents_starts_at_the_configured_position() -> None:
    started, _ = _start(RetrievalConfig(initial_position="LATEST"), parents=())
    assert started.initial == "LATEST"
