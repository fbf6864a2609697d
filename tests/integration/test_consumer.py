"""The consumer against the emulators over HTTP: kinesis-local for Kinesis, moto for DynamoDB and SQS."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from dataclasses import replace

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import CheckpointConfig, ProcessingConfig
from consumer.errors import CheckpointRejectedError
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.records import Position
from consumer.sinks.dlq import SqsDeadLetterQueue
from tests.unit.helpers import PROCESSOR_KINDS, AsyncRecordingProcessor, Journal, RecordingProcessor
from tools.tcp_proxy import FaultProxy, address

from .support import (
    create_stream,
    dynamo_worker,
    make_names,
    put_numbered,
    put_records,
    run_in_thread,
    stored_checkpoints,
    wait_active,
    wait_until,
)

pytestmark = pytest.mark.integration


def _by_shard(results: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in results:
        out.setdefault(r["ShardId"], []).append(r["SequenceNumber"])
    return out


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_every_record_of_a_multi_shard_stream_is_delivered_and_checkpointed(
    emulators, kinesis_client, dynamodb_client, unique_name, kind
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 3)
    put = _by_shard(put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(300)]))
    journal = Journal()
    processor = {"sync": RecordingProcessor, "async": AsyncRecordingProcessor}[kind]
    worker = dynamo_worker("w1", emulators, names, lambda: processor(journal, "w1"))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(journal.deliveries) >= 300, what="300 deliveries")
        wait_until(
            lambda: (
                {s: c[0] for s, c in stored_checkpoints(dynamodb_client, names.checkpoint_table).items()}
                == {s: seqs[-1] for s, seqs in put.items()}
            ),
            what="final checkpoints",
        )
    finally:
        worker.request_shutdown()
        t.join(15)
    for shard, seqs in put.items():
        assert journal.sequences(shard) == seqs
    assert journal.threads == ({"asyncio-w1"} if kind == "async" else set())


def test_split_and_merge_during_consumption_parents_first_nothing_lost(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (parent,) = create_stream(kinesis_client, names.stream, 1)
    journal = Journal()
    worker = dynamo_worker("w1", emulators, names, lambda: RecordingProcessor(journal, "w1"))
    t = run_in_thread(worker)
    expected: list[str] = []
    try:
        expected += [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"a"] * 50)]
        wait_until(lambda: len(journal.deliveries) >= 20, what="consumption under way")
        kinesis_client.split_shard(
            StreamName=names.stream, ShardToSplit=parent, NewStartingHashKey=str(2**127)
        )
        wait_active(kinesis_client, names.stream)
        expected += [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"b"] * 60)]
        shards = kinesis_client.list_shards(StreamName=names.stream)["Shards"]
        kids = sorted(s["ShardId"] for s in shards if s.get("ParentShardId") == parent)
        assert len(kids) == 2
        kinesis_client.merge_shards(
            StreamName=names.stream, ShardToMerge=kids[0], AdjacentShardToMerge=kids[1]
        )
        wait_active(kinesis_client, names.stream)
        expected += [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"c"] * 40)]
        wait_until(lambda: len(journal.deliveries) >= 150, timeout=60, what="all 150 records")
        wait_until(
            lambda: all(
                stored_checkpoints(dynamodb_client, names.checkpoint_table).get(s, (None,))[0] == "SHARD_END"
                for s in (parent, *kids)
            ),
            what="the parent's and the children's SHARD_END checkpoints",
        )
    finally:
        worker.request_shutdown()
        t.join(15)
    shards = {s["ShardId"]: s for s in kinesis_client.list_shards(StreamName=names.stream)["Shards"]}
    merged = next(s for s, d in shards.items() if d.get("AdjacentParentShardId"))
    order = [d[1] for d in journal.deliveries]
    assert sorted(journal.sequences()) == sorted(expected)  # nothing lost, nothing twice
    assert max(i for i, s in enumerate(order) if s == parent) < min(
        i for i, s in enumerate(order) if s in kids
    )
    assert max(i for i, s in enumerate(order) if s in kids) < min(
        i for i, s in enumerate(order) if s == merged
    )
    cps = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    assert cps[parent][0] == "SHARD_END" and all(cps[k][0] == "SHARD_END" for k in kids)


class Rounds:
    """The test's rounds of reading the checkpoints, counted. A completer waits for the next round every
    ``EVERY`` records, so that the checkpoints are seen advancing however loaded the machine (a busy moto takes
    up to a second to answer a scan, and the records could all be done before a second round)."""

    EVERY = 20

    def __init__(self) -> None:
        self.n = 0
        self._cond = threading.Condition()

    def taken(self) -> None:
        with self._cond:
            self.n += 1
            self._cond.notify_all()

    def wait_next(self, timeout: float = 15.0) -> None:  # a safety net only: the test's loop takes rounds
        with self._cond:
            start = self.n
            self._cond.wait_for(lambda: self.n > start, timeout)


class RandomCompleter(BaseProcessor):
    """Marks records done from another thread, in random order, and remembers which are done."""

    def __init__(self, done: set[str], lock: threading.Lock, rounds: Rounds) -> None:
        self.done, self.lock, self.rounds = done, lock, rounds

    def process_records(self, data: ProcessRecordsInput) -> None:
        records = list(data.records)
        random.shuffle(records)

        def complete() -> None:
            for i, r in enumerate(records):
                if i % Rounds.EVERY == 0:
                    self.rounds.wait_next()
                time.sleep(random.random() / 100)
                with self.lock:
                    self.done.add(r.sequence_number)
                r.done()

        threading.Thread(target=complete, daemon=True).start()


class AsyncRandomCompleter(AsyncBaseProcessor):
    """``RandomCompleter`` as asyncio code: a task on the worker's loop per batch completes its records in
    random order, awaiting between them, while later batches are already delivered."""

    def __init__(self, done: set[str], lock: threading.Lock, rounds: Rounds) -> None:
        self.done, self.lock, self.rounds = done, lock, rounds
        self.tasks: set[asyncio.Task[None]] = set()

    async def process_records(self, data: ProcessRecordsInput) -> None:
        records = list(data.records)
        random.shuffle(records)

        async def complete() -> None:
            for i, r in enumerate(records):
                if i % Rounds.EVERY == 0:
                    await asyncio.to_thread(self.rounds.wait_next)
                await asyncio.sleep(random.random() / 100)
                with self.lock:
                    self.done.add(r.sequence_number)
                r.done()

        task = asyncio.create_task(complete())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_manual_checkpoint_advances_only_over_contiguous_completions(
    emulators, kinesis_client, dynamodb_client, unique_name, kind
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    put = _by_shard(put_records(kinesis_client, names.stream, [f"m{i}".encode() for i in range(400)]))
    order = {seq: i for seqs in put.values() for i, seq in enumerate(seqs)}
    done: set[str] = set()
    lock = threading.Lock()
    rounds = Rounds()
    worker = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: {"sync": RandomCompleter, "async": AsyncRandomCompleter}[kind](done, lock, rounds),
        checkpoint=CheckpointConfig(mode="manual", flush_interval=0.05),
    )
    t = run_in_thread(worker)
    samples = 0
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cps = stored_checkpoints(dynamodb_client, names.checkpoint_table)
            with lock:
                snapshot = set(done)
            for shard, (seq, _, _) in cps.items():
                if seq is None:
                    continue
                samples += 1
                upto = put[shard][: order[seq] + 1]
                assert set(upto) <= snapshot, "checkpoint passed a record not yet done"
            rounds.taken()
            if all(cps.get(s, (None,))[0] == seqs[-1] for s, seqs in put.items()):
                break
            time.sleep(0.02)
        else:
            raise AssertionError("manual checkpoints never reached the end")
    finally:
        worker.request_shutdown()
        t.join(15)
    assert samples > 5


def test_processor_failure_goes_to_sqs_dlq_and_never_skips(
    emulators, kinesis_client, dynamodb_client, sqs_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    put = put_numbered(kinesis_client, names.stream, "d", 30)
    journal = Journal()
    worker = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: RecordingProcessor(journal, "w1", fail=lambda d: d in (b"d3", b"d17")),
        processing=ProcessingConfig(max_attempts=2, backoff_base=0.01, on_failure="dlq", dlq_url=queue),
        dlq=SqsDeadLetterQueue(emulators.client("sqs"), queue),
    )
    t = run_in_thread(worker)
    try:
        wait_until(
            lambda: (
                next(iter(stored_checkpoints(dynamodb_client, names.checkpoint_table).values()), (None,))[0]
                == put[-1]
            ),
            what="checkpoint at the end",
        )
    finally:
        worker.request_shutdown()
        t.join(15)
    messages = sqs_client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)[
        "Messages"
    ]
    bodies = sorted((json.loads(m["Body"]) for m in messages), key=lambda b: int(b["sequence_number"]))
    assert [b["sequence_number"] for b in bodies] == [put[3], put[17]]
    assert bodies[0]["error_type"] == "RuntimeError" and "d3" in bodies[0]["error"]
    assert set(journal.sequences()) | {put[3], put[17]} == set(put)


def test_processor_failure_halts_the_shard_when_configured(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    put = put_numbered(kinesis_client, names.stream, "h", 20)
    journal = Journal()
    worker = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: RecordingProcessor(journal, "w1", fail=lambda d: d == b"h9"),
        processing=ProcessingConfig(max_attempts=2, backoff_base=0.01, on_failure="halt"),
    )
    t = run_in_thread(worker)
    try:
        wait_until(lambda: any(o.halted for o in worker.owned.values()), what="halt")
        wait_until(
            lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == put[8],
            what="the checkpoint at the last record delivered before the failing one",
        )
        assert put[9] not in journal.sequences() and put[10] not in journal.sequences()
    finally:
        worker.request_shutdown()
        t.join(15)


def test_a_kinesis_outage_writes_the_checkpoint_waiting_for_its_interval(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    """Reads refused over the network: the shard writes what it delivered before its next try, not a minute
    later (its interval), so that a give-up hands the next owner the exact position."""
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    put = put_numbered(kinesis_client, names.stream, "o", 10)
    journal = Journal()
    with FaultProxy(address(emulators.kinesis_endpoint)) as proxy:
        via = replace(emulators, kinesis_endpoint=proxy.url())
        worker = dynamo_worker(
            "w1",
            via,
            names,
            lambda: RecordingProcessor(journal, "w1"),
            checkpoint=CheckpointConfig(auto_interval=60),
        )
        t = run_in_thread(worker)
        try:
            wait_until(lambda: len(journal.deliveries) == 10, what="10 deliveries")
            assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] is None  # not due
            proxy.fault("refuse")
            wait_until(
                lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == put[-1],
                what="the checkpoint at the last record delivered, written during the outage",
            )
        finally:
            proxy.heal()
            worker.request_shutdown()
            t.join(15)


def test_late_checkpoint_with_an_old_epoch_is_rejected(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    journal = Journal()
    a = dynamo_worker("a", emulators, names, lambda: RecordingProcessor(journal, "a"))
    ta = run_in_thread(a)
    wait_until(lambda: bool(a.owned), what="a owns the shard")
    epoch = next(iter(a.owned.values())).lease.epoch
    a.request_shutdown()
    ta.join(15)
    store = DynamoDBCheckpointStore(dynamodb_client, names.checkpoint_table)
    with pytest.raises(CheckpointRejectedError) as info:
        store.save(names.stream, shard, epoch, Position("1" * 56))
    assert info.value.stale_epoch
