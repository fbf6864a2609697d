"""The MultiLang protocol's messages: JSON objects, one a line, over the child's stdin and stdout.

Daemon to child: ``initialize``, ``processRecords`` (records with base64 ``data``, ``partitionKey``,
``sequenceNumber``, ``subSequenceNumber``, ``approximateArrivalTimestamp`` in epoch milliseconds),
``leaseLost``, ``shardEnded``, ``shutdownRequested``, and ``checkpoint`` (the answer to the child's request,
with ``error`` naming the KCL exception when it failed). Child to daemon: ``checkpoint`` requests
(``sequenceNumber``/``subSequenceNumber``, both null meaning "everything delivered") and ``status`` with
``responseFor`` once it has handled a message. Field names and meaning follow the KCL's MultiLangDaemon and
what amazon-kclpy's ``kcl.py`` and ``messages.py`` read.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _json_string

from consumer.records import Position, Record

__all__ = [
    "CheckpointRequest",
    "ProtocolError",
    "StatusReply",
    "checkpoint_reply",
    "encode",
    "initialize",
    "parse_child_line",
    "process_records",
]

# The KCL's exception names, as the child's client expects them in a checkpoint answer's ``error``.
SHUTDOWN = "ShutdownException"  # the lease is lost: stop checkpointing
THROTTLING = "ThrottlingException"  # the write did not go through yet: try again
INVALID_STATE = "InvalidStateException"
ILLEGAL_ARGUMENT = (
    "IllegalArgumentException"  # a position outside what was delivered, or behind the checkpoint
)


class ProtocolError(Exception):
    """The child wrote something that is not the protocol (or not what the protocol allows now)."""


@dataclass(frozen=True)
class StatusReply:
    """The child finished handling ``response_for``."""

    response_for: str


@dataclass(frozen=True)
class CheckpointRequest:
    """The child asks for a checkpoint; ``position`` None means "everything delivered so far"."""

    position: Position | None
    raw_sequence: object
    raw_sub_sequence: object


def encode(message: dict[str, object]) -> bytes:
    """One protocol line."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def initialize(shard_id: str, start: Position | None, initial_position: str) -> bytes:
    """Where the child's processor starts: the checkpoint, or the initial position's name without one."""
    if start is None:
        return encode(
            {
                "action": "initialize",
                "shardId": shard_id,
                "sequenceNumber": initial_position,
                "subSequenceNumber": 0,
            }
        )
    return encode(
        {
            "action": "initialize",
            "shardId": shard_id,
            "sequenceNumber": announced(start).sequence,
            "subSequenceNumber": announced(start).sub_sequence,
        }
    )


def announced(start: Position) -> Position:
    """The checkpoint as the child is told it. A position just before a record (sub-sequence -1: after
    ``import-kcl`` of a ``TRIM_HORIZON``/``AT_TIMESTAMP`` lease, or a replay) is not that record's sequence
    number, which would tell the child the record is done already: it is the number below it (sequence numbers
    are compared as integers; no record has it)."""
    if start.sub_sequence >= 0 or not start.sequence.isdigit() or int(start.sequence) == 0:
        return Position(start.sequence, max(start.sub_sequence, 0))
    return Position(str(int(start.sequence) - 1), 0)


def record_json(record: Record) -> str:
    """One record as the KCL's JSON-friendly record (``action: record``, base64 data). Built as text: only
    the partition key can need escaping, and this runs once per record."""
    return (
        '{"action":"record","data":"'
        + base64.b64encode(record.data).decode()
        + '","partitionKey":'
        + _json_string(record.partition_key)
        + ',"sequenceNumber":"'
        + record.sequence_number
        + '","subSequenceNumber":'
        + str(record.sub_sequence_number)
        + ',"approximateArrivalTimestamp":'
        + str(int(record.approximate_arrival.timestamp() * 1000))
        + "}"
    )


def process_records(records_json: Sequence[str], millis_behind_latest: int | None) -> bytes:
    """A ``processRecords`` line from records already encoded with ``record_json``."""
    behind = "null" if millis_behind_latest is None else str(int(millis_behind_latest))
    return f'{{"action":"processRecords","millisBehindLatest":{behind},"records":[{",".join(records_json)}]}}\n'.encode()


def checkpoint_reply(request: CheckpointRequest, error: str | None) -> bytes:
    """The answer to a checkpoint request: the position asked for, and the KCL exception name if it failed."""
    message: dict[str, object] = {
        "action": "checkpoint",
        "sequenceNumber": request.raw_sequence,
        "subSequenceNumber": request.raw_sub_sequence,
    }
    if error is not None:
        message["error"] = error
    return encode(message)


def parse_child_line(line: bytes) -> StatusReply | CheckpointRequest | None:
    """A line from the child's stdout: None for a blank line (clients pad their lines with newlines);
    ``ProtocolError`` for anything that is not a status or checkpoint message."""
    text = line.strip()
    if not text:
        return None
    try:
        message = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise ProtocolError(f"not JSON: {_clip(text)}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {_clip(text)}")
    action = message.get("action")
    if action == "status":
        response_for = message.get("responseFor")
        if not isinstance(response_for, str):
            raise ProtocolError(f"status without responseFor: {_clip(text)}")
        return StatusReply(response_for)
    if action == "checkpoint":
        seq, sub = message.get("sequenceNumber"), message.get("subSequenceNumber")
        if seq is None:
            return CheckpointRequest(None, seq, sub)
        if isinstance(seq, bool) or not isinstance(seq, (str, int)) or not str(seq).isdigit():
            return CheckpointRequest(Position("invalid", -1), seq, sub)  # answered IllegalArgumentException
        if sub is not None and (isinstance(sub, bool) or not isinstance(sub, int) or sub < 0):
            return CheckpointRequest(Position("invalid", -1), seq, sub)
        return CheckpointRequest(Position(str(seq), int(sub or 0)), seq, sub)
    raise ProtocolError(f"unknown action {action!r}: {_clip(text)}")


def _clip(text: bytes) -> str:
    shown = text[:200].decode("utf-8", "replace")
    return shown + ("..." if len(text) > 200 else "")
