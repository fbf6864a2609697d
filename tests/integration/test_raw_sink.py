"""The raw S3 sink against moto S3 over HTTP, fed by a worker on kinesis-local and moto DynamoDB."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time

import pytest

from consumer.sinks.raw_s3 import RawS3Sink

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
            out[obj["Key"]] = [json.loads(line) for line in gzip.decompress(body).splitlines()]
    return out


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
    by_payload = {
        json.dumps(ln.get("payload")) if "payload" in ln else ln["payload_base64"]: ln for ln in lines
    }
    assert by_payload[json.dumps({"id": 7})]["epoch"] >= 1
    assert "//4gYmluYXJ5" in by_payload  # b"\xff\xfe binary" kept as base64
    assert any(ln.get("payload_base64") == "cGxhaW4gdGV4dA==" for ln in lines)  # not JSON: base64 too
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
