"""Asyncio processors on the worker's one event loop: shards interleave, a blocked loop stalls no heartbeat,
and a blocking call is reported with its stack."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pytest

from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.async_processor import AsyncBaseProcessor, EventLoopThread, is_async_processor
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.loader import checked_factory
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until

SLOW_SHARD = "shardId-000000000000"


class Gated(AsyncBaseProcessor):
    """On the slow shard, each batch waits for ``gate`` (awaiting, or blocking the loop when ``block``)."""

    def __init__(self, seen: dict[str, list[bytes]], gate: Any, block: bool) -> None:
        self.seen, self.gate, self.block, self.shard = seen, gate, block, ""

    async def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id

    async def process_records(self, data: ProcessRecordsInput) -> None:
        if self.shard == SLOW_SHARD:
            if self.block:
                self.gate.wait()  # a blocking call inside a coroutine: it holds the whole loop
            else:
                await self.gate.wait()
        self.seen.setdefault(self.shard, []).extend(r.data for r in data.records)


def _worker(tables: InMemoryTables, kinesis: InMemoryKinesis, processor: Any) -> Any:
    return make_worker("w1", tables, kinesis, Journal(), processor=processor)


def test_a_slow_coroutine_of_one_shard_does_not_hold_up_the_others() -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 3)
    put = {f"shardId-{s:012d}": [f"{s}-{i}".encode() for i in range(20)] for s in range(3)}
    for shard, records in put.items():
        for data in records:
            kinesis.put("s", shard, data)
    seen: dict[str, list[bytes]] = {}
    loop_gate: list[asyncio.Event] = []

    def make() -> Gated:
        if not loop_gate:
            loop_gate.append(asyncio.Event())
        return Gated(seen, loop_gate[0], block=False)

    worker = _worker(tables, kinesis, make)
    t = start(worker)
    others = [s for s in put if s != SLOW_SHARD]
    wait_until(lambda: all(seen.get(s) == put[s] for s in others), what="the other shards, in full")
    assert SLOW_SHARD not in seen  # still awaiting its gate
    loop = worker._ctx.event_loop._loop
    loop.call_soon_threadsafe(loop_gate[0].set)
    wait_until(lambda: seen.get(SLOW_SHARD) == put[SLOW_SHARD], what="the slow shard, in order")
    worker.request_shutdown()
    t.join(5)


def test_a_blocking_call_in_a_coroutine_stalls_no_heartbeat_and_is_reported(caplog) -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 2)
    kinesis.put("s", SLOW_SHARD, b"x")
    gate = threading.Event()
    seen: dict[str, list[bytes]] = {}
    worker = _worker(tables, kinesis, lambda: Gated(seen, gate, block=True))
    worker._ctx.event_loop._blocked_warning = 0.2
    caplog.set_level(logging.WARNING, logger="consumer.lifecycle.event_loop")
    t = start(worker)
    try:
        wait_until(lambda: "w1" in tables.workers and len(worker.owned) == 2, what="both leases held")
        wait_until(lambda: worker._ctx.event_loop.blocked_episodes >= 1, what="the watchdog's report")
        beat = tables.workers["w1"].heartbeat
        # The loop stays blocked, yet the coordinator's heartbeats go on and the leases stay provably ours.
        wait_until(lambda: tables.workers["w1"].heartbeat >= beat + 5, what="heartbeats during the block")
        assert worker.validity.valid()
        assert len(worker.owned) == 2
    finally:
        gate.set()
    wait_until(lambda: seen.get(SLOW_SHARD) == [b"x"], what="the batch after the block")
    worker.request_shutdown()
    t.join(5)
    reports = [r for r in caplog.records if getattr(r, "event", None) == "async_loop_blocked"]
    assert reports, "the watchdog logs the blocked loop"
    assert "self.gate.wait()" in reports[0].__dict__["stack"]  # where it blocks, for the one who fixes it


def test_sync_and_async_processors_are_told_apart() -> None:
    class Sync(BaseProcessor):
        def process_records(self, data: ProcessRecordsInput) -> None:
            return None

    class Async(AsyncBaseProcessor):
        async def process_records(self, data: ProcessRecordsInput) -> None:
            return None

    assert not is_async_processor(Sync())
    assert is_async_processor(Async())
    # The loader's wrapper (it reports returned values) keeps an async callback a coroutine function.
    assert is_async_processor(checked_factory("tests:Async", Async)())


def test_a_value_returned_by_an_async_process_records_is_reported_once(caplog) -> None:
    class Returns(AsyncBaseProcessor):
        async def process_records(self, data: ProcessRecordsInput) -> int:  # type: ignore[override]
            return 42

    loop = EventLoopThread("test-loop")
    processor = checked_factory("tests:Returns", Returns)()
    caplog.set_level(logging.WARNING, logger="consumer.loader")
    try:
        for _ in range(2):
            loop.run(processor.process_records(None))  # type: ignore[arg-type]
    finally:
        loop.close()
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "processor_return_value_ignored"]
    assert len(warnings) == 1


def test_a_closed_loop_refuses_new_work() -> None:
    loop = EventLoopThread("test-loop")

    async def answer() -> int:
        return 7

    assert loop.run(answer()) == 7
    loop.close()
    with pytest.raises(RuntimeError, match="closed"):
        loop.run(answer())
