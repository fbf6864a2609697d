"""The dead-letter queue seam and its SQS implementation."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Protocol

from consumer.aws_errors import aws_call
from consumer.records import Record

__all__ = ["DeadLetterQueue", "InMemoryDeadLetterQueue", "SqsDeadLetterQueue", "dead_letter_body"]


class DeadLetterQueue(Protocol):
    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        """Store the record durably with its error, or raise (the shard then halts: nothing is lost)."""
        ...


def dead_letter_body(record: Record, error: BaseException, epoch: int) -> dict[str, Any]:
    """The message body: the record (data in base64), its epoch and the error it failed with.

    ``explicit_hash_key`` is there only when the record has one (a KPL user record whose producer chose its
    shard by hash key): ``redrive`` puts the record back with it, into the shard the producer chose. A body
    without it (every other record, and any message written before it was added) is put by partition key."""
    body: dict[str, Any] = {
        "stream": record.stream,
        "shard_id": record.shard_id,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "partition_key": record.partition_key,
        "approximate_arrival": record.approximate_arrival.isoformat(),
        "epoch": epoch,
        "data_base64": base64.b64encode(record.data).decode("ascii"),
        "error_type": type(error).__name__,
        "error": str(error)[:4000],
        "failed_at_ms": int(time.time() * 1000),
    }
    if record.explicit_hash_key is not None:
        body["explicit_hash_key"] = record.explicit_hash_key
    return body


class InMemoryDeadLetterQueue:
    """Keeps each dead letter's body in ``messages`` (tests, benchmarks)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        self.messages.append(dead_letter_body(record, error, epoch))


class SqsDeadLetterQueue:
    """One SQS message per dead letter; a failed send raises this package's error (``classify``)."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._c = client
        self._url = queue_url

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        body = json.dumps(dead_letter_body(record, error, epoch))
        # the sub-sequence too: every user record of a KPL aggregate shares the sequence number
        what = (
            f"dead-letter {record.shard_id}/{record.sequence_number}/{record.sub_sequence_number} "
            f"to {self._url}"
        )
        with aws_call("sqs", what, "CONSUMER_DLQ_URL"):  # any failure halts the shard: nothing is lost
            self._c.send_message(
                QueueUrl=self._url,
                MessageBody=body,
                MessageAttributes={
                    "stream": {"DataType": "String", "StringValue": record.stream},
                    "shard_id": {"DataType": "String", "StringValue": record.shard_id},
                },
            )
