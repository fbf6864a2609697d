"""A dead-lettered KPL user record keeps the explicit hash key its producer routed it by, over the emulators: a
worker dead-letters the one user record of an aggregate its processor fails on, ``python -m consumer redrive``
(a subprocess, as an operator runs it) shows the hash key in its dry run and puts the record back with it, so
it lands in the shard the producer chose (its siblings' shard), not where its partition key alone would send
it; a message written without the field (before it existed) is still put back, by partition key. A failed
send to the DLQ names the user record's sub-sequence number, not only the sequence number its aggregate
shares."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import AggRecord

from consumer import BaseProcessor, ProcessRecordsInput
from consumer.config import ProcessingConfig
from consumer.errors import ConsumerError
from consumer.records import Record
from consumer.sinks.dlq import SqsDeadLetterQueue, dead_letter_body
from tests.integration.support import create_stream, dynamo_worker, make_names, run_in_thread
from tests.integration.test_redrive import _queue_counts, _redrive
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration

# The upper half of the hash key range: the second shard of a 2-shard stream. md5("pk-6") falls in the lower
# half, so the partition key alone sends a record to the first shard.
HASH_KEY = str(2**127 + 5)
KEY = "pk-6"


class FailsOnPoison(BaseProcessor):
    """Fails every batch that holds the aggregated user record ``poison``; notes the other records' data."""

    def __init__(self, seen: list[bytes], lock: threading.Lock) -> None:
        self._seen, self._lock = seen, lock

    def process_records(self, data: ProcessRecordsInput) -> None:
        if any(r.data == b"poison" and r.aggregated for r in data.records):
            raise RuntimeError("poison")
        with self._lock:
            self._seen += [r.data for r in data.records]


def _shard_data(kinesis: Any, stream: str) -> dict[str, list[bytes]]:
    """Each shard's records' data as stored (an aggregate is one record), read from the start."""
    out: dict[str, list[bytes]] = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        it = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        data: list[bytes] = []
        while it:
            page = kinesis.get_records(ShardIterator=it, Limit=1000)
            data += [r["Data"] for r in page["Records"]]
            if not page["Records"] and page.get("MillisBehindLatest") == 0:
                break
            it = page.get("NextShardIterator")
        out[shard["ShardId"]] = data
    return out


def test_redrive_puts_a_kpl_user_record_back_with_its_explicit_hash_key(
    emulators, kinesis_client, dynamodb_client, sqs_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    first, second = create_stream(kinesis_client, names.stream, 2)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    agg = AggRecord()
    for data in (b"before", b"poison", b"after"):
        agg.add_user_record(KEY, data, HASH_KEY)
    key, hash_key, blob = agg.get_contents()
    put = kinesis_client.put_record(
        StreamName=names.stream, PartitionKey=key, ExplicitHashKey=hash_key, Data=blob
    )
    assert put["ShardId"] == second  # as the KPL routes it

    seen: list[bytes] = []
    lock = threading.Lock()
    worker = dynamo_worker(
        "w1",
        emulators,
        names,
        lambda: FailsOnPoison(seen, lock),
        processing=ProcessingConfig(
            max_attempts=1, backoff_base=0.01, backoff_max=0.05, on_failure="dlq", dlq_url=queue
        ),
        dlq=SqsDeadLetterQueue(sqs_client, queue),
    )
    t = run_in_thread(worker)
    try:
        wait_until(lambda: sum(_queue_counts(sqs_client, queue)) == 1, 30, "the poison record dead-lettered")
        wait_until(lambda: sorted(seen) == [b"after", b"before"], 30, "its siblings delivered")
    finally:
        worker.request_shutdown()
        t.join(15)
    assert not t.is_alive()
    [message] = sqs_client.receive_message(QueueUrl=queue, VisibilityTimeout=0)["Messages"]
    body = json.loads(message["Body"])
    assert (body["explicit_hash_key"], body["sub_sequence_number"]) == (HASH_KEY, 1)

    # A message written before the field existed: the same key, no hash key (put back by partition key).
    old = Record(names.stream, second, put["SequenceNumber"], 1, KEY, b"old-format", datetime.now(UTC))
    old_body = dead_letter_body(old, RuntimeError("boom"), 1)
    assert "explicit_hash_key" not in old_body
    sqs_client.send_message(QueueUrl=queue, MessageBody=json.dumps(old_body))

    dry = _redrive(emulators, "--queue", queue, "--dry-run")
    assert dry.returncode == 0, dry
    lines = [line for line in dry.stdout.splitlines() if line.startswith("would put")]
    assert len(lines) == 2, dry.stdout
    [with_key] = [line for line in lines if "6 bytes" in line]
    [without] = [line for line in lines if "10 bytes" in line]
    assert f"partition key {KEY!r} explicit hash key {HASH_KEY} 6 bytes" in with_key
    assert "hash key" not in without

    out = _redrive(emulators, "--queue", queue)
    assert out.returncode == 0, out
    assert "redrive: 2 records put back, 2 messages deleted, 0 left in the queue" in out.stdout
    assert _queue_counts(sqs_client, queue) == (0, 0)
    stored = _shard_data(kinesis_client, names.stream)
    assert stored[second] == [blob, b"poison"]  # beside its siblings, where its producer put it
    assert stored[first] == [b"old-format"]  # no hash key: where its partition key sends it


def test_a_failed_dead_letter_send_names_the_user_record(sqs_client, unique_name) -> None:
    url = sqs_client.create_queue(QueueName=unique_name("gone"))["QueueUrl"]
    sqs_client.delete_queue(QueueUrl=url)
    record = Record(
        "orders", "shardId-000000000001", "4965000111", 2, KEY, b"x", datetime.now(UTC), aggregated=True
    )
    with pytest.raises(ConsumerError) as caught:
        SqsDeadLetterQueue(sqs_client, url).send(record, RuntimeError("boom"), 1)
    assert "dead-letter shardId-000000000001/4965000111/2 to " in str(caught.value)
