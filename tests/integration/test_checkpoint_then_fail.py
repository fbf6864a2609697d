"""A processor that checkpoints each record as it goes (the common KCL shape: ``handle(r); checkpoint(r)``) and
then fails on one record, on the emulators. Its retries must retry the failing work: a record it checkpointed
before is saved already (no refusal of a checkpoint "behind the stored one" failing every retry), only the
record that fails every attempt is dead-lettered or halted on, and the shard never ends FAILED. Also a
no-argument ``checkpoint()`` after ``checkpoint(records[-1])`` in the same call, whose default lags behind it."""

from __future__ import annotations

import collections
import threading

import pytest

from consumer import Position
from consumer.config import ProcessingConfig
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.metrics.sink import InMemoryMetrics
from consumer.sinks.dlq import InMemoryDeadLetterQueue

from .support import (
    create_stream,
    dynamo_worker,
    make_names,
    put_records,
    run_in_thread,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration

COUNT, FIRST, POISON = 30, 10, b"r17"


class PerRecord(BaseProcessor):
    """``kind``: "flaky" (the poison record fails twice, then passes), "poison" (it fails every time), "twice"
    (``checkpoint(records[-1])`` twice, then ``checkpoint()``). Notes each record it handled."""

    def __init__(self, kind: str, handled: collections.Counter[bytes], lock: threading.Lock) -> None:
        self.kind, self.handled, self.lock = kind, handled, lock

    def process_records(self, data: ProcessRecordsInput) -> None:
        if self.kind == "twice":
            with self.lock:
                self.handled.update(r.data for r in data.records)
            data.checkpointer.checkpoint(data.records[-1])
            data.checkpointer.checkpoint(data.records[-1])
            data.checkpointer.checkpoint()
            return
        for r in data.records:
            with self.lock:
                self.handled[r.data] += 1
                tries = self.handled[r.data]
            if r.data == POISON and (self.kind == "poison" or tries <= 2):
                raise ValueError(f"poison {r.data!r}, try {tries}")
            data.checkpointer.checkpoint(r)


@pytest.mark.parametrize(
    ("kind", "on_failure"), [("flaky", "halt"), ("poison", "halt"), ("poison", "dlq"), ("twice", "halt")]
)
def test_a_checkpoint_then_a_failure_retries_the_failing_record_alone(
    emulators, kinesis_client, dynamodb_client, unique_name, kind: str, on_failure: str
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    payloads = [f"r{i}".encode() for i in range(COUNT)]
    put = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, payloads[:FIRST])]
    handled: collections.Counter[bytes] = collections.Counter()
    lock = threading.Lock()
    dlq = InMemoryDeadLetterQueue()
    worker = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: PerRecord(kind, handled, lock),
        processing=ProcessingConfig(
            max_attempts=3, backoff_base=0.01, backoff_max=0.05, on_failure=on_failure, dlq_url="in-memory"
        ),
        dlq=dlq,
    )
    t = run_in_thread(worker)
    halts = kind == "poison" and on_failure == "halt"

    def saved_at(sequence: str) -> bool:
        return stored_checkpoints(dynamodb_client, names.checkpoint_table).get(shard, (None,))[0] == sequence

    try:
        # a first batch, so that the one that fails has one before it (checkpoint()'s default is its end)
        wait_until(lambda: saved_at(put[-1]), what="the first batch checkpointed")
        put += [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, payloads[FIRST:])]
        poison = put[int(POISON[1:])]
        # halted: saved up to the record before the poison one (the processor's own checkpoint), and kept there
        last = put[int(POISON[1:]) - 1] if halts else put[-1]
        if halts:
            wait_until(lambda: any(o.halted for o in worker.owned.values()), what="the shard halted")
        wait_until(lambda: saved_at(last), what=f"the checkpoint at {last}")
        if halts:
            assert [o.halted_at for o in worker.owned.values()] == [Position(poison)]  # the failing record
    finally:
        worker.request_shutdown()
        t.join(15)
    metrics = worker.metrics
    assert isinstance(metrics, InMemoryMetrics)
    assert metrics.total("ShardsFailed") == metrics.total("ShardsGivenUp") == 0
    if kind != "twice":  # what the processor checkpointed before the poison record is never handed again
        assert [handled[p] for p in payloads[: int(POISON[1:])]] == [1] * int(POISON[1:])
    match kind, on_failure:
        case "flaky", _:
            assert set(handled) == set(payloads)  # every record delivered
            assert handled[POISON] == 3  # retried until it passed on its third try
            assert metrics.total("ProcessorFailures") == 2
        case "poison", "halt":
            assert handled[POISON] == 3 + 3  # every batch attempt, then every attempt of it alone
            assert set(handled) == set(payloads[: int(POISON[1:]) + 1])  # nothing past it
        case "poison", "dlq":
            assert set(handled) == set(payloads)
            assert [m["sequence_number"] for m in dlq.messages] == [poison]  # only the failing record
            assert dlq.messages[0]["error_type"] == "ValueError"
        case "twice", _:
            assert set(handled) == set(payloads)
            assert metrics.total("ProcessorFailures") == 0  # its checkpoint() was not refused
        case _:
            raise AssertionError(kind)
    if on_failure != "dlq":
        assert dlq.messages == []
