"""Reading the dead-letter queue's messages back: what ``consumer.sinks.dlq`` wrote, checked field by field.

A message is a dead letter of this consumer when its body is the JSON object ``dead_letter_body`` makes: the
record's stream, shard, sequence number, partition key and bytes (base64), and the error it failed with; a KPL
user record the producer routed by explicit hash key also has ``explicit_hash_key`` (a body without it, as every
message written before it was added, is put back by partition key alone). Any other body (not JSON, a field missing or of the wrong type, bytes that are not base64, a record Kinesis would
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
_MAX_HASH_KEY = 2**128 - 1  # Kinesis: a hash key is a 128-bit integer in decimal (0 to 2^128 - 1)


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
    #: The hash key the producer routed the record by (a KPL user record can carry one), in decimal; None when
    #: it was routed by its partition key (or the message predates the field).
    explicit_hash_key: str | None = None

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


def _hash_key(body: dict[str, Any]) -> str | None:
    """The body's ``explicit_hash_key`` (None when absent or null), as Kinesis takes it: a decimal integer from 0
    to 2^128 - 1 without leading zeros; ``NotADeadLetter`` otherwise (PutRecords would refuse the whole call)."""
    value = body.get("explicit_hash_key")
    if value is None:
        return None
    if not isinstance(value, str):
        raise NotADeadLetter(f"field 'explicit_hash_key' must be a string (a {type(value).__name__})")
    if not (value.isascii() and value.isdigit()) or (len(value) > 1 and value[0] == "0"):
        raise NotADeadLetter(f"field 'explicit_hash_key' is not a decimal hash key: {value[:60]!r}")
    if len(value) > len(str(_MAX_HASH_KEY)) or int(value) > _MAX_HASH_KEY:
        raise NotADeadLetter(f"field 'explicit_hash_key' is above 2^128 - 1: {value[:60]!r}")
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
    hash_key = _hash_key(doc)
    letter = DeadLetter(
        stream=stream,
        shard_id=shard_id,
        sequence_number=sequence,
        sub_sequence_number=sub,
        partition_key=key,
        data=data,
        error_type=_text(doc, "error_type", required=False),
        error=_text(doc, "error", required=False),
        explicit_hash_key=hash_key,
    )
    if letter.size > MAX_RECORD_BYTES:
        raise NotADeadLetter(f"the record has {letter.size} bytes with its key; Kinesis takes at most 1 MiB")
    return letter
