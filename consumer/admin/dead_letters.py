"""Reading the dead-letter queue's messages back: what ``consumer.sinks.dlq`` wrote, checked field by field.

A message is a dead letter of this consumer when its body is the JSON object ``dead_letter_body`` makes: the
record's stream, shard, sequence number, partition key and bytes (base64), and the error it failed with. Any
other body (not JSON, a field missing or of the wrong type, bytes that are not base64, a record Kinesis would
not take back) is ``NotADeadLetter``, with the reason: ``redrive`` leaves such a message in the queue. Pure:
no AWS call.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from consumer.settings.streams import STREAM_NAME

__all__ = ["MAX_RECORD_BYTES", "DeadLetter", "NotADeadLetter", "parse_dead_letter"]

#: Kinesis takes a record whose data and partition key (UTF-8) add up to at most 1 MiB.
MAX_RECORD_BYTES = 1024 * 1024
_MAX_PARTITION_KEY = 256  # characters (Kinesis: 1 to 256 Unicode characters)


class NotADeadLetter(ValueError):
    """A queue message that is not a dead letter of this consumer; the message says why."""


@dataclass(frozen=True)
class DeadLetter:
    """One dead-lettered record, as ``consumer.sinks.dlq.dead_letter_body`` wrote it."""

    stream: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    data: bytes
    error_type: str
    error: str

    @property
    def size(self) -> int:
        """What the record counts towards Kinesis's limits: its data plus its partition key in UTF-8."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))

    @property
    def where(self) -> str:
        """``stream/shard@sequence`` (``/sub`` for a KPL sub-record): where the record was read."""
        sub = f"/{self.sub_sequence_number}" if self.sub_sequence_number else ""
        return f"{self.stream}/{self.shard_id}@{self.sequence_number}{sub}"


def _text(body: dict[str, Any], field: str, *, required: bool = True) -> str:
    value = body.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        got = "missing" if field not in body else f"a {type(value).__name__}"
        raise NotADeadLetter(f"field {field!r} must be a string ({got})")
    return value


def parse_dead_letter(body: str) -> DeadLetter:
    """The dead letter in an SQS message body, or ``NotADeadLetter`` naming what is wrong with it."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise NotADeadLetter(f"not JSON ({type(exc).__name__}: {str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise NotADeadLetter(f"not a JSON object (a {type(doc).__name__})")
    stream = _text(doc, "stream")
    if not STREAM_NAME.fullmatch(stream):
        raise NotADeadLetter(f"field 'stream' is not a stream name: {stream[:130]!r}")
    shard_id = _text(doc, "shard_id")
    if not shard_id:
        raise NotADeadLetter("field 'shard_id' is empty")
    sequence = _text(doc, "sequence_number")
    if not sequence.isdigit():
        raise NotADeadLetter(f"field 'sequence_number' is not a sequence number: {sequence[:60]!r}")
    sub = doc.get("sub_sequence_number", 0)
    if isinstance(sub, bool) or not isinstance(sub, int):
        raise NotADeadLetter(f"field 'sub_sequence_number' must be an integer ({type(sub).__name__})")
    key = _text(doc, "partition_key")
    if not 1 <= len(key) <= _MAX_PARTITION_KEY:
        raise NotADeadLetter(f"field 'partition_key' must have 1 to 256 characters, has {len(key)}")
    encoded = _text(doc, "data_base64")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NotADeadLetter(f"field 'data_base64' is not base64 ({exc})") from None
    letter = DeadLetter(
        stream=stream,
        shard_id=shard_id,
        sequence_number=sequence,
        sub_sequence_number=sub,
        partition_key=key,
        data=data,
        error_type=_text(doc, "error_type", required=False),
        error=_text(doc, "error", required=False),
    )
    if letter.size > MAX_RECORD_BYTES:
        raise NotADeadLetter(f"the record has {letter.size} bytes with its key; Kinesis takes at most 1 MiB")
    return letter
