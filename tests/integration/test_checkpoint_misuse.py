"""A processor's checkpoint calls that would skip records, and a guard that outlives its ownership, on the
emulators. ``checkpoint(SHARD_END)`` on an open shard, or a position past what the processor was given,
would end the shard or skip records for every later owner: each is refused with nothing written, as the KCL
refuses them, and the shard goes on. A guard kept by work the processor left running turns invalid once its
shard is handed to another worker, or the worker stops."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from consumer import SHARD_END, Position
from consumer.errors import LeaseLostError
from consumer.lifecycle.processor import (
    BaseProcessor,
    Checkpointer,
    InitializationInput,
    LeaseGuard,
    ProcessRecordsInput,
)
from consumer.records import Record

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


class Misusing(BaseProcessor):
    """On its first batch, tries every checkpoint that would skip records (noting what each raised), then
    records what it was given; the worker checkpoints as usual."""

    def __init__(self, refusals: list[str], delivered: list[str]) -> None:
        self.refusals, self.delivered = refusals, delivered
        self.tried = False

    def process_records(self, data: ProcessRecordsInput) -> None:
        if not self.tried:
            self.tried = True
            last = data.records[-1].sequence_number
            for bad in (SHARD_END, Position(str(int(last) + 1)), Position("9" * 56), Position("abc"), last):
                try:
                    data.checkpointer.checkpoint(bad)  # type: ignore[arg-type] - the str is the misuse
                except (TypeError, ValueError) as exc:
                    self.refusals.append(f"{type(exc).__name__}: {exc}")
        self.delivered.extend(r.sequence_number for r in data.records)


def test_checkpoints_that_would_skip_records_are_refused_and_the_shard_goes_on(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    first = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"a"] * 5)]
    refusals: list[str] = []
    delivered: list[str] = []
    worker = dynamo_worker("w1", emulators, names, lambda: Misusing(refusals, delivered))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(delivered) >= 5, what="the first records")
        later = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"b"] * 5)]
        wait_until(lambda: len(delivered) >= 10, what="the records after the misuse: the shard did not end")
        wait_until(
            lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == later[-1],
            what="the checkpoint on the last record",
        )
    finally:
        worker.request_shutdown()
        t.join(15)
    assert delivered == first + later
    assert len(refusals) == 5, refusals
    assert (
        refusals[0].startswith("ValueError: checkpoint(SHARD_END)") and "outside shard_ended" in refusals[0]
    )
    assert all("past the last record handed to the processor" in r for r in refusals[1:3])
    assert "is not a sequence number" in refusals[3]
    assert refusals[4].startswith("TypeError:") and "Position(sequence_number)" in refusals[4]
    stored = stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0]
    assert stored == later[-1]  # never SHARD_END, never past what was read


class Keeping(BaseProcessor):
    """Keeps each shard's guard, the way work a processor starts (a flusher, a task) would."""

    def __init__(self, guards: dict[str, LeaseGuard], checkpointers: dict[str, tuple[Checkpointer, Record]]):
        self.guards, self.checkpointers = guards, checkpointers
        self.shard = ""

    def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id
        self.guards[data.shard_id] = data.guard

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.checkpointers[self.shard] = (data.checkpointer, data.records[-1])


def _owners(dynamodb: Any, table: str) -> dict[str, str | None]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["lease_key"]["S"].rsplit("#", 1)[1]: i.get("owner", {}).get("S")
        for i in items
        if i["lease_key"]["S"].startswith("shard#")
    }


def test_a_guard_turns_invalid_once_its_shard_is_handed_over_or_the_worker_stops(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    shards = create_stream(kinesis_client, names.stream, 2)
    put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(20)])
    guards: dict[str, LeaseGuard] = {}
    kept: dict[str, tuple[Checkpointer, Record]] = {}
    a = dynamo_worker("a", emulators, names, lambda: Keeping(guards, kept))
    b = dynamo_worker("b", emulators, names, lambda: Keeping({}, {}))
    ta = run_in_thread(a)
    tb: threading.Thread | None = None
    try:
        wait_until(lambda: set(kept) == set(shards), what="a reads both shards")
        assert all(g.is_valid() for g in guards.values())
        tb = run_in_thread(b)
        wait_until(
            lambda: (
                sorted(o or "" for o in _owners(dynamodb_client, names.lease_table).values()) == ["a", "b"]
            ),
            timeout=30,
            what="one shard handed to b",
        )
        owners = _owners(dynamodb_client, names.lease_table)
        moved = next(s for s, o in owners.items() if o == "b")
        stayed = next(s for s, o in owners.items() if o == "a")
        assert not guards[moved].is_valid()
        with pytest.raises(LeaseLostError, match="this ownership has ended"):
            guards[moved].ensure_valid()
        assert guards[stayed].is_valid()  # the worker's other shard is still its own
    finally:
        a.request_shutdown()
        ta.join(15)
        b.request_shutdown()
        if tb is not None:
            tb.join(15)
    assert not guards[stayed].is_valid()  # the worker stopped: its shards were released
    checkpointer, record = kept[stayed]
    with pytest.raises(LeaseLostError):
        checkpointer.checkpoint(record)
    with pytest.raises(LeaseLostError):  # not the stopped event loop's RuntimeError
        asyncio.run(checkpointer.acheckpoint(record))
