"""A shard halted on a poison record while the raw S3 sink still buffers the records before it, on the
emulators: the sink is told (``shutdown_requested``) and writes them, and the halted lease's checkpoint is right
before the poison record. Skipping it the documented way (``replay --checkpoint`` of the failing record) then
skips that record alone: every other record lands in S3 exactly once. Before, the buffered records were never
written, the checkpoint stayed behind them, and the skip lost them for good."""

from __future__ import annotations

import gzip
import json
import logging
from collections import Counter
from typing import Any

import pytest

from consumer.lifecycle.processor import ProcessRecordsInput
from consumer.sinks.raw_s3 import RawS3Sink

from .support import (
    create_stream,
    dynamo_worker,
    make_names,
    put_records,
    run_cli,
    run_in_thread,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration

POISON = b'{"poison": true}'


class _PoisonSink(RawS3Sink):
    """The raw sink behind a processor step that cannot take the poison record (it raises before buffering)."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        if any(r.data == POISON for r in data.records):
            raise ValueError("cannot take the poison record")
        super().process_records(data)


def _landed(s3: Any, bucket: str) -> Counter[str]:
    """How many times each sequence number is in the bucket's objects."""
    seen: Counter[str] = Counter()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            body = gzip.decompress(s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read())
            seen.update(json.loads(line)["sequence_number"] for line in body.split(b"\n")[:-1])
    return seen


def test_a_halt_flushes_what_came_before_the_poison_record_and_skipping_it_loses_nothing_else(
    emulators, kinesis_client, dynamodb_client, s3_client, unique_name, caplog
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    caplog.set_level(logging.INFO)
    good = [json.dumps({"n": i}).encode() for i in range(20)]
    before = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, good)]
    poison, *after = [
        r["SequenceNumber"]
        for r in put_records(
            kinesis_client, names.stream, [POISON, *(b'{"after": %d}' % i for i in range(5))]
        )
    ]
    # Buffers that neither fill nor age during the test: only a flush writes them.
    sink = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: _PoisonSink(client=s3_client, bucket=bucket, max_records=1000, max_age=600),
    )
    thread = run_in_thread(sink)
    try:
        wait_until(
            lambda: any(getattr(r, "event", None) == "shard_halted" for r in caplog.records),
            timeout=30,
            what="the shard halted on the poison record",
        )
        wait_until(
            lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == before[-1],
            timeout=30,
            what="the checkpoint right before the poison record",
        )
        assert _landed(s3_client, bucket) == Counter(before)  # the buffered records, written by the halt
    finally:
        sink.request_shutdown()
        thread.join(20)
    assert not thread.is_alive()

    # The on-call engineer skips the poison record as docs/operations.md says; a fixed sink goes on.
    out = run_cli(
        emulators, names, "replay", "--stream", names.stream, "--checkpoint", f"{poison}/0", "--yes"
    )
    assert out.returncode == 0, out.stderr
    fixed = dynamo_worker(
        "w2",
        emulators,
        names,
        lambda: RawS3Sink(client=s3_client, bucket=bucket, max_records=1000, max_age=0.3),
    )
    thread = run_in_thread(fixed)
    try:
        wait_until(
            lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == after[-1],
            timeout=30,
            what="the records after the poison record written",
        )
    finally:
        fixed.request_shutdown()
        thread.join(20)
    assert _landed(s3_client, bucket) == Counter(before + after)  # all but the skipped record, each once
