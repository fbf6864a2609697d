"""The raw sink's ``max_bytes`` counts what is written: each object's uncompressed bytes (its lines with their
newlines) stay within it, for binary data (base64, 4/3 larger), JSON text full of escapes (up to twice larger)
and small records (where the line's other fields are most of it); only a record larger alone is an object
over it."""

from __future__ import annotations

import gzip
import json
import os
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.checkpoint.policy import ManualCheckpoints
from consumer.records import Record
from consumer.settings.raw_sink import DEPRECATED_RAW_VARIABLES, RAW_SINK_VARIABLES
from consumer.sinks.raw_s3 import RawS3Sink, encode_line

ARRIVAL = datetime(2026, 11, 21, 1, 2, 3, tzinfo=UTC)
MAX_BYTES = 100_000


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*RAW_SINK_VARIABLES.values(), *DEPRECATED_RAW_VARIABLES):
        monkeypatch.delenv(name, raising=False)


class _Puts:
    """An S3 client that keeps each object's uncompressed body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def put_object(self, **kwargs: Any) -> None:
        self.bodies.append(gzip.decompress(kwargs["Body"]))


class _Batch:
    def __init__(self, records: list[Record]) -> None:
        self.records = records


def _records(payloads: list[bytes]) -> list[Record]:
    records = [
        Record("orders", "shardId-000000000001", str(10**55 + i), 0, "pk", data, ARRIVAL)
        for i, data in enumerate(payloads)
    ]
    return list(ManualCheckpoints().track(records))


def _written(payloads: list[bytes]) -> list[bytes]:
    client = _Puts()
    sink = RawS3Sink(client=client, bucket="lake-raw", max_bytes=MAX_BYTES, max_records=10_000, max_age=60)
    records = _records(payloads)
    sink.process_records(_Batch(records))
    sink.flush()
    assert b"".join(client.bodies) == b"".join(encode_line(r, 0) + b"\n" for r in records)  # all, in order
    return client.bodies


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda i: os.urandom(1_000), id="binary-base64"),
        pytest.param(lambda i: json.dumps(['"' * 490]).encode(), id="json-escapes"),
        pytest.param(lambda i: json.dumps(["\\" * 300, "é" * 100]).encode(), id="backslashes-unicode"),
        pytest.param(lambda i: b"%d" % i, id="small"),
    ],
)
def test_every_object_stays_within_max_bytes_and_is_filled(payload: Any) -> None:
    payloads = [payload(i) for i in range(2_000)]
    bodies = _written(payloads)
    assert len(bodies) > 1
    for body in bodies:
        assert len(body) <= MAX_BYTES
    lines = [line + b"\n" for line in b"".join(bodies).split(b"\n")[:-1]]
    start = 0
    for body in bodies[:-1]:  # full: the next record's line would not have fitted
        count = body.count(b"\n")
        assert len(body) + len(lines[start + count]) > MAX_BYTES
        start += count


def test_a_record_larger_than_max_bytes_alone_is_one_object_of_its_own() -> None:
    bodies = _written([b"a" * 100, os.urandom(MAX_BYTES), b"b" * 100])
    assert [body.count(b"\n") for body in bodies] == [1, 1, 1]
    assert len(bodies[1]) > MAX_BYTES and all(len(b) <= MAX_BYTES for b in (bodies[0], bodies[2]))
