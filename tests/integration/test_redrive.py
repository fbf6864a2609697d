"""``python -m consumer redrive``, run as an operator runs it (a subprocess) against the emulators: a worker
dead-letters the records its processor fails on, redrive puts exactly those back (bytes and partition keys
equal) and empties the queue, a worker then sees them again; dry runs change nothing; messages that are not
dead letters stay in the queue; throttled puts are put again; bad flags are one line naming the flag."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from consumer import BaseProcessor, ProcessRecordsInput
from consumer.records import Record
from consumer.sinks.dlq import SqsDeadLetterQueue
from tests.integration.support import (
    REPO,
    create_stream,
    make_names,
    put_records,
    spawn_worker,
    stop_process,
)
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration


class FailMarked(BaseProcessor):
    """Appends each record it takes to ``REDRIVE_JOURNAL`` (partition key, bytes in base64); fails every batch
    holding a record whose data contains ``FAIL``, unless ``REDRIVE_FIXED=1`` (the cause fixed)."""

    def __init__(self) -> None:
        self._path = os.environ["REDRIVE_JOURNAL"]
        self._fixed = os.environ.get("REDRIVE_FIXED") == "1"

    def process_records(self, data: ProcessRecordsInput) -> None:
        if not self._fixed and any(b"FAIL" in r.data for r in data.records):
            raise RuntimeError("a record marked FAIL")  # before writing: the batch is all or nothing
        lines = "".join(
            json.dumps({"pk": r.partition_key, "data": base64.b64encode(r.data).decode(), "s": r.shard_id})
            + "\n"
            for r in data.records
        )
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(lines)


def _journal(path: Path) -> list[tuple[str, bytes]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["pk"], base64.b64decode(r["data"])) for r in rows]


def _redrive(
    emulators: Any, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {**os.environ, **emulators.env(), "CONSUMER_LOG_LEVEL": "ERROR"}
    base.pop("CONSUMER_DLQ_URL", None)  # only what the test gives
    full = {**base, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "consumer", "redrive", *args],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _stream_records(kinesis: Any, stream: str) -> list[tuple[str, bytes]]:
    """Every record in the stream, read with GetRecords from the start of each shard (partition key, bytes)."""
    out: list[tuple[str, bytes]] = []
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        it = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while it:
            page = kinesis.get_records(ShardIterator=it, Limit=10000)
            out += [(r["PartitionKey"], r["Data"]) for r in page["Records"]]
            if page.get("MillisBehindLatest") == 0 and not page["Records"]:
                break
            it = page.get("NextShardIterator")
    return out


def _queue_counts(sqs: Any, url: str) -> tuple[int, int]:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def _dead_letter(sqs: Any, url: str, stream: str, records: list[tuple[str, bytes]]) -> None:
    """Dead-letter these (partition key, bytes) as the worker does: with the real DLQ writer."""
    dlq = SqsDeadLetterQueue(sqs, url)
    for i, (key, data) in enumerate(records):
        record = Record(
            stream, f"shardId-00000000000{i % 2}", str(49_000_000 + i), 0, key, data, datetime.now(UTC)
        )
        dlq.send(record, ValueError(f"cannot parse order {i}"), 2)


def _letters(n: int, size: int = 0) -> list[tuple[str, bytes]]:
    return [(f"key-\u00e9-{i}", b"\x00\xff" + i.to_bytes(2, "big") + os.urandom(size)) for i in range(n)]


def test_records_a_worker_dead_lettered_are_put_back_and_seen_again(
    emulators, kinesis_client, dynamodb_client, sqs_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    payloads = [b"\xfe\x00order-%d" % i + (b"-FAIL" if i % 7 == 3 else b"") for i in range(40)]
    keys = [f"customer-{i % 9}-\u00fc" for i in range(40)]
    put_records(kinesis_client, names.stream, payloads, keys)
    failing = Counter((k, p) for k, p in zip(keys, payloads, strict=True) if b"FAIL" in p)
    journal = tmp_path / "delivered.jsonl"
    env = {
        "CONSUMER_PROCESSOR": "tests.integration.test_redrive:FailMarked",
        "CONSUMER_ON_FAILURE": "dlq",
        "CONSUMER_DLQ_URL": queue,
        "CONSUMER_MAX_ATTEMPTS": "1",
        "REDRIVE_JOURNAL": str(journal),
    }
    worker = spawn_worker(emulators, names, "w1", tmp_path / "w1.jsonl", **env)
    try:
        wait_until(lambda: len(_journal(journal)) == 40 - sum(failing.values()), 60, "the good records")
        wait_until(lambda: sum(_queue_counts(sqs_client, queue)) == sum(failing.values()), 30, "dead letters")
    finally:
        assert stop_process(worker) == 0
    assert not set(_journal(journal)) & set(failing)

    out = _redrive(emulators, "--queue", queue)
    assert out.returncode == 0, out
    assert f"redrive: {sum(failing.values())} records put back" in out.stdout
    assert f"{sum(failing.values())} messages deleted, 0 left in the queue" in out.stdout
    assert _queue_counts(sqs_client, queue) == (0, 0)
    assert (
        Counter(_stream_records(kinesis_client, names.stream))
        == Counter(zip(keys, payloads, strict=True)) + failing
    )

    journal.unlink()
    fixed = spawn_worker(emulators, names, "w2", tmp_path / "w2.jsonl", **env, REDRIVE_FIXED="1")
    try:
        wait_until(lambda: len(_journal(journal)) >= sum(failing.values()), 60, "the redriven records")
    finally:
        assert stop_process(fixed) == 0
    assert Counter(_journal(journal)) == failing  # exactly those, from the checkpoint on


def test_dry_run_changes_nothing_and_stream_and_max_choose_where_and_how_many(
    emulators, kinesis_client, sqs_client, unique_name
) -> None:
    source, retry = unique_name("src"), unique_name("retry")
    create_stream(kinesis_client, source, 2)
    create_stream(kinesis_client, retry, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    letters = _letters(5, size=10)
    _dead_letter(sqs_client, queue, source, letters)

    dry = _redrive(emulators, "--queue", queue, "--dry-run")
    assert dry.returncode == 0, dry
    lines = [line for line in dry.stdout.splitlines() if line.startswith("would put")]
    assert len(lines) == 5
    for key, data in letters:
        (line,) = [line for line in lines if f"partition key {key!r} " in line]
        assert f"stream {source} shard shardId-" in line and f"{len(data)} bytes" in line
        assert "sequence 49000" in line and "ValueError: cannot parse order" in line
    assert (
        "dry run: 5 records would be put back, 0 left in the queue; nothing was put or deleted" in dry.stdout
    )
    assert _stream_records(kinesis_client, source) == []
    assert _queue_counts(sqs_client, queue) == (
        5,
        0,
    )  # visible again at once: a real run right after finds them

    first = _redrive(emulators, "--queue", queue, "--stream", retry, "--max", "2")
    assert first.returncode == 0, first
    assert "redrive: 2 records put back, 2 messages deleted" in first.stdout
    assert _queue_counts(sqs_client, queue) == (3, 0)
    rest = _redrive(emulators, "--stream", retry, env={"CONSUMER_DLQ_URL": queue})  # the variable names it
    assert rest.returncode == 0, rest
    assert "redrive: 3 records put back, 3 messages deleted" in rest.stdout
    assert Counter(_stream_records(kinesis_client, retry)) == Counter(letters)
    assert _stream_records(kinesis_client, source) == []
    assert _queue_counts(sqs_client, queue) == (0, 0)


def test_a_message_that_is_not_a_dead_letter_is_left_in_the_queue_and_reported(
    emulators, kinesis_client, sqs_client, unique_name
) -> None:
    stream = unique_name("s")
    create_stream(kinesis_client, stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    letters = _letters(2)
    _dead_letter(sqs_client, queue, stream, letters)
    _dead_letter(sqs_client, queue, f"{stream}-deleted", [("gone", b"of a stream deleted since")])
    bad = {
        sqs_client.send_message(QueueUrl=queue, MessageBody=body)["MessageId"]: body
        for body in ("not json {", json.dumps({"stream": stream, "shard_id": "shardId-000000000000"}))
    }

    out = _redrive(emulators, "--queue", queue)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    for message_id in bad:
        (line,) = [line for line in out.stdout.splitlines() if message_id in line]
        assert line.startswith(f"skipped message {message_id}: ") and line.endswith("left in the queue")
    assert "not JSON" in out.stdout and "field 'sequence_number' must be a string (missing)" in out.stdout
    (gone,) = [line for line in out.stdout.splitlines() if f"{stream}-deleted" in line]
    assert gone.startswith("skipped message ") and "does not exist" in gone and "--stream" in gone
    assert "redrive: 2 records put back, 2 messages deleted, 3 left in the queue" in out.stdout
    assert Counter(_stream_records(kinesis_client, stream)) == Counter(letters)
    assert _queue_counts(sqs_client, queue) == (3, 0)  # visible again at once
    left = sqs_client.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    bodies = {m["MessageId"]: m["Body"] for m in left}
    assert {i: bodies[i] for i in bad} == bad and len(bodies) == 3
    assert json.loads(next(b for i, b in bodies.items() if i not in bad))["partition_key"] == "gone"


def test_throttled_puts_are_put_again_and_each_record_lands_once(
    emulators, kinesis_client, sqs_client, unique_name
) -> None:
    stream = unique_name("s")
    create_stream(kinesis_client, stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    letters = _letters(200, size=8 * 1024)  # 1.6 MiB in one PutRecords: over the shard's 1 MiB/s
    _dead_letter(sqs_client, queue, stream, letters)

    out = _redrive(emulators, "--queue", queue)
    assert out.returncode == 0, out
    assert "throttled and put again" in out.stdout
    assert "redrive: 200 records put back" in out.stdout and "200 messages deleted" in out.stdout
    assert Counter(_stream_records(kinesis_client, stream)) == Counter(letters)
    assert _queue_counts(sqs_client, queue) == (0, 0)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--max", "0"), "--max: must be >= 1, got 0"),
        (("--max", "many"), "--max"),
        (("--queue", ""), "--queue: must not be empty"),
        (("--queue", "orders-dlq"), "--queue: must be an SQS queue URL"),
        ((), "--queue: is required"),
        (("--queue", "{queue}", "--stream", "a b"), "--stream: must be a stream name"),
        (("--queue", "{queue}-gone"), "--queue: SQS queue"),
        (("--queue", "{queue}", "--stream", "{stream}-gone"), "--stream: Kinesis stream"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(
    emulators, sqs_client, kinesis_client, unique_name, args: tuple[str, ...], named: str
) -> None:
    stream = unique_name("s")
    create_stream(kinesis_client, stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    _dead_letter(sqs_client, queue, stream, _letters(1))
    out = _redrive(emulators, *(a.format(queue=queue, stream=stream) for a in args))
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0], out.stderr
    assert _queue_counts(sqs_client, queue) == (1, 0) and _stream_records(kinesis_client, stream) == []
