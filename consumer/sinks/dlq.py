"""The dead-letter queue seam and its SQS implementation."""

from __future__ import annotations

import base64
import json
import time
from typing import Any, Protocol

from botocore.exceptions import ClientError

from consumer.errors import ConsumerError, MissingResourceError
from consumer.records import Record

__all__ = ["DeadLetterQueue", "InMemoryDeadLetterQueue", "SqsDeadLetterQueue", "dead_letter_body"]


class DeadLetterQueue(Protocol):
    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        """Store the record durably with its error, or raise (the shard then halts: nothing is lost)."""
        ...


def dead_letter_body(record: Record, error: BaseException, epoch: int) -> dict[str, Any]:
    return {
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


class InMemoryDeadLetterQueue:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        self.messages.append(dead_letter_body(record, error, epoch))


class SqsDeadLetterQueue:
    def __init__(self, client: Any, queue_url: str) -> None:
        self._c = client
        self._url = queue_url

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        body = json.dumps(dead_letter_body(record, error, epoch))
        try:
            self._c.send_message(
                QueueUrl=self._url,
                MessageBody=body,
                MessageAttributes={
                    "stream": {"DataType": "String", "StringValue": record.stream},
                    "shard_id": {"DataType": "String", "StringValue": record.shard_id},
                },
            )
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                raise MissingResourceError(f"dead-letter queue {self._url} does not exist") from exc
            raise ConsumerError(
                f"dead-letter send failed for {record.shard_id}/{record.sequence_number}"
            ) from exc
