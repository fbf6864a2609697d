"""Asyncio processors on the emulators, as an all-asyncio service uses them: shards' coroutines overlap on
the worker's one loop, a coroutine that never ends holds only its shard and is cancelled at stop with its
cleanup run, and manual checkpoints from tasks (and executor threads) completing out of order never pass a
record that is not done."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import (
    CheckpointConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.kinesis import BotoKinesis

from .support import (
    LEASES,
    create_stream,
    make_names,
    put_records,
    run_in_thread,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration


def _worker(
    emulators: Any,
    names: Any,
    factory: Any,
    *,
    checkpoint: CheckpointConfig | None = None,
    shutdown: ShutdownConfig | None = None,
    worker_id: str = "w1",
) -> Worker:
    ddb = emulators.client("dynamodb")
    config = WorkerConfig(
        application="it",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id=worker_id,
        streams=(StreamSpec(names.stream, factory),),
        lease=LEASES,
        retrieval=RetrievalConfig(idle_time_between_reads=0.05, max_records=500),
        processing=ProcessingConfig(backoff_base=0.01, backoff_max=0.05),
        checkpoint=checkpoint or CheckpointConfig(auto_interval=0),
        shutdown=shutdown or ShutdownConfig(deadline=10.0),
    )
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, names.lease_table, names.checkpoint_table),
        DynamoDBCheckpointStore(ddb, names.checkpoint_table),
        BotoKinesis(emulators.client("kinesis")),
        metrics=InMemoryMetrics(),
    )


class Overlap:
    """Shared by every shard's processor: how many first batches are awaiting at once (on the one loop)."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.inside = 0
        self.most = 0
        self.all_in: asyncio.Event | None = None  # made on the worker's loop, where it is awaited
        self.passed = 0
        self.lock = threading.Lock()


class WaitsForTheOthers(AsyncBaseProcessor):
    """Each shard's first batch awaits until every shard's first batch is awaiting too: it only returns if
    the loop runs them concurrently (a loop that ran them one by one would wait for ever)."""

    def __init__(self, overlap: Overlap) -> None:
        self.overlap, self.first = overlap, True

    async def process_records(self, data: ProcessRecordsInput) -> None:
        if not self.first:
            return
        self.first = False
        o = self.overlap
        if o.all_in is None:
            o.all_in = asyncio.Event()
        o.inside += 1
        o.most = max(o.most, o.inside)
        if o.inside == o.shards:
            o.all_in.set()
        await o.all_in.wait()
        o.inside -= 1
        with o.lock:
            o.passed += 1


def test_the_first_batches_of_eight_shards_await_at_the_same_time_on_the_one_loop(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 8)
    put = put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(120)])
    shards = len({r["ShardId"] for r in put})
    overlap = Overlap(shards)
    worker = _worker(emulators, names, lambda: WaitsForTheOthers(overlap))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: overlap.passed == shards, timeout=60, what="every shard's first batch through")
    finally:
        worker.request_shutdown()
        t.join(30)
    assert overlap.most == shards


HANG = b"hang"


class HangsOnOneRecord(AsyncBaseProcessor):
    """Processes records; the batch holding ``HANG`` awaits for ever. Cancelled, it cleans up with an
    ``await`` (as closing an ``aiohttp.ClientSession`` does) and notes that it did."""

    def __init__(self, seen: dict[str, list[bytes]], hung: threading.Event, cleaned: threading.Event) -> None:
        self.seen, self.hung, self.cleaned, self.shard = seen, hung, cleaned, ""

    async def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id

    async def process_records(self, data: ProcessRecordsInput) -> None:
        for record in data.records:
            if record.data == HANG:
                self.hung.set()
                try:
                    await asyncio.Event().wait()
                finally:
                    await asyncio.sleep(0.01)
                    self.cleaned.set()
            self.seen.setdefault(self.shard, []).append(record.data)


def test_a_coroutine_that_never_ends_holds_only_its_shard_and_is_cancelled_with_its_cleanup_at_stop(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    stuck, other = create_stream(kinesis_client, names.stream, 2)
    seen: dict[str, list[bytes]] = {}
    hung, cleaned = threading.Event(), threading.Event()
    shutdown = ShutdownConfig(deadline=2.0, final_checkpoint_timeout=2.0)
    worker = _worker(emulators, names, lambda: HangsOnOneRecord(seen, hung, cleaned), shutdown=shutdown)

    def put_to(shard: str, payloads: list[bytes]) -> list[dict]:
        key = {stuck: "0", other: str(2**127)}[shard]  # the lower and the upper half of the hash keys
        out = []
        for p in payloads:
            res = kinesis_client.put_record(
                StreamName=names.stream, Data=p, PartitionKey="k", ExplicitHashKey=key
            )
            assert res["ShardId"] == shard
            out.append(res)
        return out

    first = put_to(stuck, [b"s0", b"s1"])
    t = run_in_thread(worker)
    try:
        wait_until(lambda: seen.get(stuck) == [b"s0", b"s1"], timeout=30, what="the first records")
        put_to(stuck, [HANG, b"s3"])
        assert hung.wait(30)
        later = put_to(other, [b"o0", b"o1", b"o2"])
        wait_until(lambda: seen.get(other) == [b"o0", b"o1", b"o2"], timeout=30, what="the other shard")
    finally:
        began = time.monotonic()
        worker.request_shutdown()
        t.join(30)
    took = time.monotonic() - began
    assert not t.is_alive()
    assert took < shutdown.deadline + shutdown.final_checkpoint_timeout + 3.0
    assert cleaned.is_set(), (
        "the cancelled coroutine's cleanup (an await in its finally block) ran to its end"
    )
    stored = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    assert stored[other][0] == later[-1]["SequenceNumber"]
    assert stored[stuck][0] == first[-1]["SequenceNumber"]  # the last record done before the hung one
    assert seen[stuck] == [b"s0", b"s1"]  # nothing after the hung record was delivered


class DoneOutOfOrder(AsyncBaseProcessor):
    """Manual mode: each record is finished by a task of its own after ``process_records`` has returned,
    the later records first; the gated one finishes on an executor thread, once the test opens the gate."""

    checkpoint_mode = "manual"

    def __init__(self, gated: bytes, gate: threading.Event, done: list[bytes]) -> None:
        self.gated, self.gate, self.done = gated, gate, done
        self.tasks: set[asyncio.Task[None]] = set()

    async def process_records(self, data: ProcessRecordsInput) -> None:
        n = len(data.records)
        for i, record in enumerate(data.records):
            task = asyncio.create_task(self._finish(record, delay=0.005 * (n - i)))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _finish(self, record: Any, delay: float) -> None:
        if record.data == self.gated:

            def blocking() -> None:  # e.g. a driver without asyncio support
                self.gate.wait()
                record.done()

            await asyncio.get_running_loop().run_in_executor(None, blocking)
        else:
            await asyncio.sleep(delay)
            record.done()
        self.done.append(record.data)


def test_manual_checkpoints_from_tasks_finishing_out_of_order_never_pass_a_record_not_done(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    payloads = [f"r{i}".encode() for i in range(10)]
    seqs = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, payloads)]
    gate, done = threading.Event(), []
    worker = _worker(
        emulators,
        names,
        lambda: DoneOutOfOrder(b"r5", gate, done),
        checkpoint=CheckpointConfig(mode="manual", flush_interval=0.1),
    )
    t = run_in_thread(worker)

    def checkpoint() -> str | None:
        return next(iter(stored_checkpoints(dynamodb_client, names.checkpoint_table).values()))[0]

    try:
        wait_until(lambda: len(done) == 9, timeout=30, what="every record but the gated one done")
        wait_until(lambda: checkpoint() == seqs[4], timeout=30, what="the checkpoint up to the gated record")
        assert checkpoint() == seqs[4]  # r6..r9 are done, r5 is not: the checkpoint stays before it
        gate.set()
        wait_until(lambda: checkpoint() == seqs[9], timeout=30, what="the checkpoint at the last record")
    finally:
        gate.set()
        worker.request_shutdown()
        t.join(30)
    assert sorted(done) == sorted(payloads)


class ChecksLater(AsyncBaseProcessor):
    """After its first batch, leaves a task behind that checkpoints that batch's first record once the
    test opens the gate, long after ``process_records`` returned (and maybe after the shard moved on)."""

    def __init__(self, gate: threading.Event, results: dict[str, str]) -> None:
        self.gate, self.results, self.shard = gate, results, ""
        self.task: asyncio.Task[None] | None = None

    async def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id

    async def process_records(self, data: ProcessRecordsInput) -> None:
        if self.task is None and data.records:
            self.task = asyncio.create_task(self._later(data, data.records[0]))

    async def _later(self, data: ProcessRecordsInput, record: Any) -> None:
        await asyncio.to_thread(self.gate.wait)
        try:
            await data.checkpointer.acheckpoint(record)
            self.results[self.shard] = "written"
        except Exception as exc:
            self.results[self.shard] = type(exc).__name__


def test_a_checkpoint_from_a_task_that_outlived_its_lease_is_refused(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(40)])
    gate, results = threading.Event(), {}
    factory = lambda: ChecksLater(gate, results)  # noqa: E731
    a = _worker(emulators, names, factory, worker_id="a")
    ta = run_in_thread(a)
    b: Worker | None = None
    tb = None
    try:
        wait_until(lambda: len(a.owned) == 2, timeout=30, what="a owns both shards")
        b = _worker(emulators, names, factory, worker_id="b")
        tb = run_in_thread(b)
        wait_until(lambda: len(a.owned) == 1 and len(b.owned) == 1, timeout=60, what="one shard handed to b")
        moved = next(iter(b.owned.values())).lease.shard_id
        kept = next(iter(a.owned.values())).lease.shard_id
        gate.set()
        wait_until(lambda: len(results) == 2, timeout=30, what="both late checkpoints tried")
    finally:
        gate.set()
        for w in (a, b):
            if w is not None:
                w.request_shutdown()
        for t in (ta, tb):
            if t is not None:
                t.join(30)
    assert results[moved] == "LeaseLostError"  # the epoch fence: the shard moved on
    # The shard still ours refuses it too, but as a position behind the stored one (the processor's error,
    # docs/protocol.md), not as a lost lease.
    assert results[kept] == "CheckpointRejectedError"
