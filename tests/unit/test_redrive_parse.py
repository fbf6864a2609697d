"""Reading dead-letter messages back (``consumer.admin.dead_letters``): what the DLQ writer sends is read with
its exact bytes and partition key; anything else is refused with the reason, never a traceback."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.admin.dead_letters import MAX_RECORD_BYTES, NotADeadLetter, parse_dead_letter
from consumer.records import Record
from consumer.sinks.dlq import dead_letter_body


def _record(data: bytes = b"\x00\xff payload \xe9", key: str = "k\u00e9y-1", sub: int = 0) -> Record:
    return Record(
        "orders",
        "shardId-000000000003",
        "49650001112223334445556667778889990001",
        sub,
        key,
        data,
        datetime(2026, 11, 28, tzinfo=UTC),
        aggregated=bool(sub),
    )


def _body(**changes: Any) -> str:
    body = dead_letter_body(_record(), ValueError("bad order"), 7)
    body["failed_at_ms"] = 1_795_834_079_000  # fixed: every pytest-xdist worker must collect the same cases
    for field, value in changes.items():
        if value is _DROP:
            del body[field]
        else:
            body[field] = value
    return json.dumps(body)


_DROP = object()


def test_the_writers_body_reads_back_with_its_exact_bytes_and_partition_key() -> None:
    record = _record()
    letter = parse_dead_letter(json.dumps(dead_letter_body(record, RuntimeError("boom"), 4)))
    assert letter.data == record.data and letter.partition_key == record.partition_key
    assert (letter.stream, letter.shard_id, letter.sequence_number) == (
        record.stream,
        record.shard_id,
        record.sequence_number,
    )
    assert (letter.error_type, letter.error) == ("RuntimeError", "boom")
    assert letter.size == len(record.data) + len(record.partition_key.encode())  # UTF-8 bytes, as Kinesis


def test_a_kpl_sub_record_keeps_its_sub_sequence() -> None:
    letter = parse_dead_letter(json.dumps(dead_letter_body(_record(sub=5), RuntimeError("x"), 1)))
    assert letter.sub_sequence_number == 5 and letter.where.endswith("/5")


def test_empty_data_and_a_body_without_the_error_are_still_dead_letters() -> None:
    assert parse_dead_letter(_body(data_base64="")).data == b""
    letter = parse_dead_letter(_body(error=_DROP, error_type=_DROP, sub_sequence_number=_DROP))
    assert (letter.error, letter.error_type, letter.sub_sequence_number) == ("", "", 0)


_REFUSED = [
    ("not json", "not JSON"),
    ("", "not JSON"),
    ("[1, 2]", "not a JSON object (a list)"),
    ('"text"', "not a JSON object (a str)"),
    ("[" * 100_000, "not JSON"),  # RecursionError in json: still a reason, not a traceback
    (_body(stream=_DROP), "field 'stream' must be a string (missing)"),
    (_body(stream=3), "field 'stream' must be a string (a int)"),
    (_body(stream="a b"), "field 'stream' is not a stream name"),
    (_body(shard_id=""), "field 'shard_id' is empty"),
    (_body(sequence_number=_DROP), "field 'sequence_number' must be a string (missing)"),
    (_body(sequence_number="12x"), "field 'sequence_number' is not a sequence number"),
    (_body(sub_sequence_number="1"), "field 'sub_sequence_number' must be an integer"),
    (_body(sub_sequence_number=True), "field 'sub_sequence_number' must be an integer"),
    (_body(partition_key=_DROP), "field 'partition_key' must be a string (missing)"),
    (_body(partition_key=""), "field 'partition_key' must have 1 to 256 characters, has 0"),
    (_body(partition_key="k" * 257), "has 257"),
    (_body(data_base64=_DROP), "field 'data_base64' must be a string (missing)"),
    (_body(data_base64="@@@="), "field 'data_base64' is not base64"),
    (_body(data_base64="abc"), "field 'data_base64' is not base64"),
    (_body(error=5), "field 'error' must be a string (a int)"),
    (
        _body(data_base64=base64.b64encode(b"x" * MAX_RECORD_BYTES).decode()),
        "Kinesis takes at most 1 MiB",
    ),
]


@pytest.mark.parametrize(("body", "reason"), _REFUSED, ids=[reason for _, reason in _REFUSED])
def test_anything_else_is_refused_with_the_reason(body: str, reason: str) -> None:
    with pytest.raises(NotADeadLetter) as caught:
        parse_dead_letter(body)
    assert reason in str(caught.value)
