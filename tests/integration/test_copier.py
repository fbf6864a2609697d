"""The epoch-fenced stream-to-stream copier, kinesis-local to kinesis-local."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from consumer.errors import LeaseLostError
from consumer.examples.copier import StreamCopier
from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput
from consumer.records import Record

from .support import create_stream, dynamo_worker, make_names, put_records, run_in_thread, wait_until

pytestmark = pytest.mark.integration


def _read_all(kinesis, stream: str) -> list[bytes]:
    out = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        it = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while it:
            resp = kinesis.get_records(ShardIterator=it, Limit=1000)
            out += [r["Data"] for r in resp["Records"]]
            if not resp["Records"] and resp.get("MillisBehindLatest") == 0:
                break
            it = resp.get("NextShardIterator")
    return out


def test_copier_copies_every_record_with_its_source_and_epoch(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    target = unique_name("copy")
    create_stream(kinesis_client, target, 1)
    put = put_records(kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(50)])
    client = emulators.client("kinesis")
    worker = dynamo_worker(
        "copier", emulators, names, lambda: StreamCopier(client=client, target_stream=target)
    )
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(_read_all(kinesis_client, target)) >= 50, what="50 copies")
    finally:
        worker.request_shutdown()
        t.join(15)
    copies = [raw.split(b"\n", 1) for raw in _read_all(kinesis_client, target)]
    headers = [json.loads(h) for h, _ in copies]
    assert len(copies) == 50
    assert sorted(h["seq"] for h in headers) == sorted(r["SequenceNumber"] for r in put)
    assert all(h["epoch"] >= 1 and h["src"].startswith(f"{names.stream}/shardId-") for h in headers)
    assert sorted(json.loads(body)["n"] for _, body in copies) == list(range(50))


class _Guard:
    epoch = 7

    def is_valid(self) -> bool:
        return False

    def ensure_valid(self) -> None:
        raise LeaseLostError("lapsed")


class _NoPut:
    def put_records(self, **_kwargs):  # pragma: no cover - must never be called
        raise AssertionError("a fenced copier wrote")


def test_fenced_copier_writes_nothing() -> None:
    copier = StreamCopier(client=_NoPut(), target_stream="t")
    copier.initialize(InitializationInput("s", "sh", 7, None, "TRIM_HORIZON", _Guard()))
    record = Record("s", "sh", "1", 0, "pk", b"x", datetime.now(UTC))
    with pytest.raises(LeaseLostError):
        copier.process_records(ProcessRecordsInput([record], None, 7, 0, _Guard()))  # type: ignore[arg-type]
