"""The raw S3 sink against moto S3 over HTTP, fed by a worker on kinesis-local and moto DynamoDB."""

from __future__ import annotations

import gzip
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from consumer.records import Record
from consumer.sinks.raw_s3 import RawS3Sink, record_data
from tests.unit.test_raw_format import CASES

from .support import create_stream, dynamo_worker, make_names, put_records, run_in_thread, wait_until

pytestmark = pytest.mark.integration

KEY = re.compile(
    r"^raw/stream=(?P<stream>[^/]+)/date=\d{4}-\d{2}-\d{2}/hour=\d{2}/"
    r"(?P<shard>shardId-\d+)_(?P<first>\d+)_0_(?P<last>\d+)_0\.jsonl\.gz$"
)


def _objects(s3, bucket: str) -> dict[str, list[dict]]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"]] = [_strict(line) for line in gzip.decompress(body).split(b"\n")[:-1]]
    return out


def _strict(line: bytes) -> dict[str, Any]:
    """A raw line read by a strict JSON parser: no NaN/Infinity, no duplicate keys, UTF-8."""

    def no_constant(name: str) -> Any:
        raise AssertionError(f"{name} in a raw line: {line!r}")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        assert len({k for k, _ in pairs}) == len(pairs), line
        return dict(pairs)

    return json.loads(line.decode("utf-8"), parse_constant=no_constant, object_pairs_hook=unique)


def _checkpoints(ddb, table: str) -> dict[str, str]:
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["lease_key"]["S"].rsplit("#", 1)[1]: i["sequence"]["S"] for i in items if "sequence" in i}


def _run_sink(emulators, names, bucket: str, max_records: int, stop_when) -> None:
    s3 = emulators.client("s3")
    worker = dynamo_worker(
        "sink",
        emulators,
        names,
        lambda: RawS3Sink(client=s3, bucket=bucket, max_records=max_records, max_age=0.5),
    )
    t = run_in_thread(worker)
    try:
        stop_when()
    finally:
        worker.request_shutdown()
        t.join(20)


def test_sink_lands_every_record_and_checkpoints_only_what_is_written(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    payloads = [json.dumps({"id": i}).encode() for i in range(150)] + [b"\xff\xfe binary", b"plain text"]
    put = put_records(kinesis_client, names.stream, payloads)
    last = {r["ShardId"]: r["SequenceNumber"] for r in put}
    violations: list[str] = []
    stop = threading.Event()

    def watch() -> None:  # checkpoint first, then S3: every checkpointed record must already be in S3
        while not stop.is_set():
            cps = _checkpoints(dynamodb_client, names.checkpoint_table)
            landed = {
                (ln["shard_id"], ln["sequence_number"])
                for lines in _objects(s3_client, bucket).values()
                for ln in lines
            }
            for r in put:
                cp = cps.get(r["ShardId"])
                if (
                    cp is not None
                    and int(r["SequenceNumber"]) <= int(cp)
                    and (r["ShardId"], r["SequenceNumber"]) not in landed
                ):
                    violations.append(r["SequenceNumber"])
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _run_sink(
        emulators,
        names,
        bucket,
        40,
        lambda: wait_until(
            lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last,
            what="sink checkpoints at the end",
        ),
    )
    stop.set()
    watcher.join(5)
    assert not violations, f"checkpoint ran ahead of S3 for {violations[:5]}"
    objects = _objects(s3_client, bucket)
    lines = [ln for body in objects.values() for ln in body]
    assert sorted(ln["sequence_number"] for ln in lines) == sorted(r["SequenceNumber"] for r in put)
    for key, body in objects.items():
        m = KEY.match(key)
        assert m, key
        assert m["first"] == body[0]["sequence_number"] and m["last"] == body[-1]["sequence_number"]
        assert {ln["shard_id"] for ln in body} == {m["shard"]}
    by_data = {record_data(ln): ln for ln in lines}
    assert sorted(by_data) == sorted(payloads)
    assert by_data[json.dumps({"id": 7}).encode()]["epoch"] >= 1
    assert by_data[b"\xff\xfe binary"]["data_base64"] == "//4gYmluYXJ5"  # not UTF-8: base64
    assert by_data[b"plain text"]["data_base64"] == "cGxhaW4gdGV4dA=="  # not JSON: base64 too
    assert all(ln["v"] == 2 for ln in lines)
    assert all(ln["arrival_time"].endswith("Z") and isinstance(ln["sequence_number"], str) for ln in lines)


def test_redelivered_batch_with_the_same_bounds_overwrites_its_object(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    put = put_records(kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(60)])
    last = {r["ShardId"]: r["SequenceNumber"] for r in put}
    _run_sink(
        emulators,
        names,
        bucket,
        20,
        lambda: wait_until(lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last),
    )
    first = _objects(s3_client, bucket)
    # The same records consumed again from scratch (fresh lease and checkpoint tables): same keys, same bytes.
    again = make_names(unique_name, dynamodb_client)
    again.stream = names.stream
    _run_sink(
        emulators,
        again,
        bucket,
        20,
        lambda: wait_until(lambda: _checkpoints(dynamodb_client, again.checkpoint_table) == last),
    )
    second = _objects(s3_client, bucket)
    assert set(first) == set(second) and len(first) == 3


def test_every_case_of_the_issue_lands_as_a_strict_line_holding_the_exact_bytes(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name
) -> None:
    """NaN, 1e400, 40-digit integers, 20-digit decimals, duplicate keys, escapes, a BOM, whitespace, binary:
    put with PutRecords, read by a worker, written by the sink to moto S3, downloaded, and given back."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    payloads = [data for _, data, _ in CASES if data]  # Kinesis refuses an empty record
    put = put_records(kinesis_client, names.stream, payloads)
    last = {r["ShardId"]: r["SequenceNumber"] for r in put}
    _run_sink(
        emulators,
        names,
        bucket,
        1000,
        lambda: wait_until(lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last),
    )
    lines = {ln["sequence_number"]: ln for body in _objects(s3_client, bucket).values() for ln in body}
    assert {seq: record_data(lines[seq]) for seq in lines} == {
        r["SequenceNumber"]: data for r, data in zip(put, payloads, strict=True)
    }
    as_text = {data: text for _, data, text in CASES}
    for r, data in zip(put, payloads, strict=True):
        assert ("data" in lines[r["SequenceNumber"]]) == as_text[data], data


class _Timers:
    """``InitializationInput.timers`` fired by the test: each ``fire`` runs the callbacks due."""

    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        self.due.append(callback)

    def fire(self) -> None:
        due, self.due = self.due, []
        for callback in due:
            callback()


def test_missing_bucket_is_one_short_line_naming_it_not_a_traceback_per_flush(s3_client, unique_name, caplog):
    bucket = unique_name("nobucket")  # never created
    sink = RawS3Sink(client=s3_client, bucket=bucket, max_age=0.05)
    guard = SimpleNamespace(ensure_valid=lambda: None)
    caplog.set_level(logging.WARNING, logger="consumer.sinks.raw_s3")
    timers = _Timers()
    sink.initialize(SimpleNamespace(guard=guard, epoch=1, shard_id="shardId-000000000000", timers=timers))  # type: ignore[arg-type]
    record = Record(
        "orders", "shardId-000000000000", "1", 0, "pk", b"{}", datetime(2026, 11, 21, 1, tzinfo=UTC)
    )
    sink.process_records(SimpleNamespace(records=[record]))  # type: ignore[arg-type]
    for buffer in sink._buffers.values():
        buffer.born -= 1.0  # past its age
    for _ in range(150):  # the age timer, as the worker's runner would fire it: well over a hundred attempts
        timers.fire()
    failures = [r for r in caplog.records if getattr(r, "event", None) == "raw_flush_failed"]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    [failure] = failures
    assert failure.exc_info is None and "\n" not in failure.getMessage() and len(failure.getMessage()) < 300
    assert bucket in failure.getMessage() and "does not exist" in failure.getMessage()
    assert failure.bucket == bucket
    assert sink._buffers and sink.objects_written == 0  # kept for the next attempt, nothing marked done
