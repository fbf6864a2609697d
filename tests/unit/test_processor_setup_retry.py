"""A processor whose ``initialize`` (or factory) raises when a shard starts (its database is down, say) is
retried in place with the shard's backoff, and the lease is handed on only after the give-up bound.

Before, the error ended the shard FAILED at once and the lease went back to the leader, which gave it out again
at once: 46 ownerships (epochs) in 6 s for two shards on one worker, each one a lease write and a checkpoint
write, and a log line with a traceback each."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pytest

from consumer import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.leases.memory import InMemoryTables
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import FAST_LEASES, Journal, make_worker

SHARDS = 2


class Flaky(BaseProcessor):
    """Its ``initialize`` raises until ``healthy`` is set; counts its tries and records what it gets."""

    tries = 0
    lock = threading.Lock()
    healthy = threading.Event()
    got: list[bytes] = []

    def initialize(self, data: InitializationInput) -> None:
        with Flaky.lock:
            Flaky.tries += 1
        if not Flaky.healthy.is_set():
            raise ConnectionError("orders database unreachable")

    def process_records(self, data: ProcessRecordsInput) -> None:
        with Flaky.lock:
            Flaky.got.extend(r.data for r in data.records)


def _told(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", "") == event]


def test_initialize_failing_is_retried_in_place_then_the_shard_runs_on_the_same_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    Flaky.tries, Flaky.got = 0, []
    Flaky.healthy.clear()
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", SHARDS)
    for i in range(10):
        kinesis.put("s", f"shardId-{i % SHARDS:012d}", f"r{i}".encode())
    worker = make_worker(
        "w",
        tables,
        kinesis,
        Journal(),
        processor=Flaky,
        lease=replace(FAST_LEASES, give_up_after=30.0),  # far beyond the tries below, however slow
    )
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while Flaky.tries < 4 * SHARDS:  # several tries of each shard, within the give-up bound
            assert time.monotonic() < deadline, Flaky.tries
            time.sleep(0.01)
        assert time.monotonic() < deadline
        epochs = {key: own.lease.epoch for key, own in worker.owned.items()}
        assert len(epochs) == SHARDS
        Flaky.healthy.set()
        while len(Flaky.got) < 10:
            assert time.monotonic() < deadline, Flaky.got
            time.sleep(0.01)
        # The same ownership throughout: retried in place, the lease never moved.
        assert {key: own.lease.epoch for key, own in worker.owned.items()} == epochs
    finally:
        assert worker.stop(20)
    assert sorted(Flaky.got) == sorted(f"r{i}".encode() for i in range(10))
    assert not _told(caplog, "shard_given_up") and not _told(caplog, "shard_failed")
    setup = _told(caplog, "processor_setup_failed")  # its traceback, once per shard's ownership
    assert len(setup) == SHARDS and all(r.exc_info for r in setup)
    assert "ConnectionError: orders database unreachable" in setup[0].error  # type: ignore[attr-defined]
    first = _told(caplog, "transient_failure")
    assert len(first) == SHARDS and {r.operation for r in first} == {"setup"}  # type: ignore[attr-defined]


def test_initialize_failing_for_ever_moves_the_lease_once_per_give_up_bound_not_several_times_a_second() -> (
    None
):
    Flaky.tries, Flaky.got = 0, []
    Flaky.healthy.clear()
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    worker = make_worker(
        "w",
        tables,
        kinesis,
        Journal(),
        processor=Flaky,
    )
    give_up = FAST_LEASES.give_up_seconds
    worker.start()
    started = time.monotonic()
    try:
        while time.monotonic() - started < 3 * give_up:
            time.sleep(0.05)
        [lease] = tables.leases.values()
        epoch = lease.epoch
    finally:
        assert worker.stop(20)
    # A move per give-up bound, each a release and an assignment (two epochs): before, dozens in this time.
    assert 1 <= epoch <= 1 + 2 * 3, epoch
