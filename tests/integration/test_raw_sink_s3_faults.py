"""The raw S3 sink while S3 fails: faults injected over the network (a TCP proxy in front of moto S3)."""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from typing import Any

import boto3
import pytest

from consumer.sinks.raw_s3 import RawS3Sink
from tools.emulators.endpoints import client_kwargs
from tools.tcp_proxy import FaultProxy, address

from .support import create_stream, dynamo_worker, make_names, put_records, run_in_thread, wait_until

pytestmark = pytest.mark.integration


def _lines(s3: Any, bucket: str) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out[obj["Key"]] = [json.loads(line) for line in gzip.decompress(body).split(b"\n")[:-1]]
    return out


def _checkpoints(ddb: Any, table: str) -> dict[str, str]:
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["lease_key"]["S"].rsplit("#", 1)[1]: i["sequence"]["S"] for i in items if "sequence" in i}


def test_an_s3_outage_during_a_size_flush_keeps_the_buffer_and_lands_each_record_once(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, caplog
) -> None:
    """S3 resets every connection while a buffer reaches max_records: the shard does not halt after the processor
    retries, the buffer is not filled with copies of the retried batch, and once S3 is back every record is
    in exactly one object whose name gives its first and last record."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    caplog.set_level(logging.INFO)
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        s3 = boto3.client("s3", **client_kwargs(proxy.url(), retries={"mode": "standard", "max_attempts": 1}))
        proxy.fault("reset")
        worker = dynamo_worker(
            "sink", emulators, names, lambda: RawS3Sink(client=s3, bucket=bucket, max_records=10, max_age=0.5)
        )
        thread = run_in_thread(worker)
        try:
            put = put_records(
                kinesis_client, names.stream, [json.dumps({"n": i}).encode() for i in range(25)]
            )
            last = {r["ShardId"]: r["SequenceNumber"] for r in put}

            # three PUTs reset: the processor's retries of the batch (3 attempts) would be used up by now
            wait_until(lambda: proxy.stats.resets >= 3, timeout=20, what="three PUTs reset")
            proxy.heal()
            wait_until(
                lambda: _checkpoints(dynamodb_client, names.checkpoint_table) == last,
                timeout=30,
                what="every record checkpointed once S3 is back",
            )
        finally:
            worker.request_shutdown()
            thread.join(20)
    halted = [r.getMessage() for r in caplog.records if getattr(r, "event", None) == "shard_halted"]
    assert not halted, halted
    objects = _lines(s3_client, bucket)
    seqs = Counter(ln["sequence_number"] for body in objects.values() for ln in body)
    assert sorted(seqs) == sorted(r["SequenceNumber"] for r in put)
    assert set(seqs.values()) == {1}, {s: n for s, n in seqs.items() if n > 1}
    for key, body in objects.items():
        name = key.rsplit("/", 1)[1]
        assert name.startswith(f"{body[0]['shard_id']}_{body[0]['sequence_number']}_0_"), key
        assert name.endswith(f"_{body[-1]['sequence_number']}_0.jsonl.gz"), key
