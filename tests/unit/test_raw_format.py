"""The raw sink's line format (format 2): strict JSON lines from which any reader gets the record's exact bytes,
the sink's settings checked at construction, and a missing bucket reported in one short line."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.checkpoint.checkpointer import OrderedTracker
from consumer.errors import MissingResourceError
from consumer.records import Record
from consumer.settings.raw_sink import DEPRECATED_RAW_VARIABLES, RAW_SINK_VARIABLES
from consumer.sinks.raw_s3 import RAW_FORMAT, RawS3Sink, _Buffer, encode_line, json_text, record_data
from tools.pipeline_data import _EXOTIC, _MALFORMED_LINES, RawSpec, generate_raw

ARRIVAL = datetime(2026, 11, 21, 1, 2, 3, 456789, tzinfo=UTC)

#: (case, record bytes, kept as text?) - every case of issue 12, and the bounds of "JSON text".
CASES: list[tuple[str, bytes, bool]] = [
    ("NaN (not JSON)", b"NaN", False),
    ("NaN inside an object", b'{"x": NaN}', False),
    ("Infinity", b"[Infinity, -Infinity]", False),
    ("1e400 (JSON, past a double)", b"1e400", True),
    ("40-digit integer", b"1234567890123456789012345678901234567890", True),
    ("20-digit decimal", b"0.12345678901234567890", True),
    ("pi to 40 digits", b'{"pi": 3.141592653589793238462643383279502884197}', True),
    ("duplicate keys", b'{"a":1,"a":2}', False),
    ("duplicate keys deep down", b'[{"b":{"c":1,"c":1}}]', False),
    ("unicode escapes", b'{"name":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/"}', True),
    ("raw UTF-8", '{"name":"café 😀 \u2028"}'.encode(), True),
    ("escaped lone surrogate", b'"\\ud800"', False),
    ("escaped backslash before u", b'"\\\\ud800"', True),
    ("byte-order mark", b'\xef\xbb\xbf{"a":1}', False),
    ("whitespace and CR-LF", b'\r\n {\r\n\t"a" : [ 1 , -0 , 1E+2 ]\r\n}\r\n ', True),
    ("key order", b'{"z":1,"a":2,"m":{"y":1,"b":2}}', True),
    ("binary", b"\x00\xff\xfe binary \x80", False),
    ("not JSON text", b"plain text", False),
    ("trailing garbage", b"[1] x", False),
    ("empty", b"", False),
    ("only whitespace", b" \n", False),
    ("JSON string", b'"5"', True),
    ("JSON null", b"null", True),
    ("control character in a string", b'"a\x01b"', False),
    ("invalid UTF-8 in a string", b'"\xc3\x28"', False),
    ("nesting 500", b"[" * 500 + b"]" * 500, True),
    ("nesting 501", b"[" * 501 + b"]" * 501, False),
    ("number of 1,000 characters", b"9" * 1000, True),
    ("number of 1,001 characters", b"9" * 1001, False),
    ("a 10,001-character key", b'{"' + b"k" * 10_001 + b'":1}', False),
]


def _strict_loads(line: bytes) -> dict[str, Any]:
    """RFC 8259 without leniency: no NaN/Infinity, no duplicate keys, UTF-8."""

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError(f"duplicate keys in {keys}")
        return dict(pairs)

    value = json.loads(line.decode("utf-8"), parse_constant=no_constant, object_pairs_hook=unique)
    assert isinstance(value, dict)
    return value


def _record(data: bytes, seq: str = "49600000000000000000000000000000000000000000000000000001") -> Record:
    return Record("orders", "shardId-000000000001", seq, 0, "pk-1", data, ARRIVAL)


@pytest.mark.parametrize(("case", "data", "as_text"), CASES, ids=[c[0] for c in CASES])
def test_every_line_is_strict_json_and_gives_back_the_exact_bytes(case, data, as_text):
    line = encode_line(_record(data), epoch=3)
    assert b"\n" not in line and b"\r" not in line
    parsed = _strict_loads(line)
    assert parsed["v"] == RAW_FORMAT == 2
    assert record_data(parsed) == data
    assert ("data" in parsed, "data_base64" in parsed) == (as_text, not as_text)
    if as_text:
        assert parsed["data"].encode("utf-8") == data  # the text itself, not a re-serialization
    assert (json_text(data) is not None) == as_text


def test_line_fields_and_layout():
    line = encode_line(_record(b'{"b": 1, "a": 2}'), epoch=7)
    assert line == (
        b'{"v":2,"stream":"orders","shard_id":"shardId-000000000001",'
        b'"sequence_number":"49600000000000000000000000000000000000000000000000000001",'
        b'"sub_sequence_number":0,"partition_key":"pk-1","arrival_time":"2026-11-21T01:02:03.456Z",'
        b'"epoch":7,"data":"{\\"b\\": 1, \\"a\\": 2}"}'
    )


def test_record_data_refuses_what_is_not_a_format_2_line():
    with pytest.raises(ValueError, match="format-2"):
        record_data({"payload": 1})
    with pytest.raises(ValueError, match="exactly one"):
        record_data({"v": 2, "data": "1", "data_base64": "MQ=="})
    with pytest.raises(ValueError, match="not base64"):
        record_data({"v": 2, "data_base64": "YW Jj"})


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_survive_the_line_encoding(data):
    assert record_data(_strict_loads(encode_line(_record(data), epoch=1))) == data


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**60), max_value=10**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JSON, st.sampled_from([None, 0, 2]), st.booleans())
def test_json_texts_are_kept_as_text_exactly(value, indent, ascii_only):
    data = json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()
    parsed = _strict_loads(encode_line(_record(data), epoch=1))
    assert parsed["data"].encode() == data


def test_generator_writes_what_the_sink_writes(tmp_path: Path):
    """tools.pipeline_data (benchmark and Spark tests) against the sink's encoder, byte for byte."""
    generate_raw(
        tmp_path, RawSpec(records=3_000, shards=2, hours=1, exotic_rate=0.2, base64_rate=0.1, malformed=3)
    )
    checked = 0
    for path in tmp_path.rglob("*.jsonl.gz"):
        for line in gzip.decompress(path.read_bytes()).split(b"\n")[:-1]:
            if line.decode() in _MALFORMED_LINES or line.endswith(b"\r"):
                continue
            parsed = _strict_loads(line)
            record = Record(
                parsed["stream"],
                parsed["shard_id"],
                parsed["sequence_number"],
                parsed["sub_sequence_number"],
                parsed["partition_key"],
                record_data(parsed),
                datetime.fromisoformat(parsed["arrival_time"]),
            )
            assert encode_line(record, parsed["epoch"]) == line
            checked += 1
    assert checked > 3_000
    for raw, is_json in _EXOTIC:
        assert (json_text(raw.replace(b"{n}", b"1")) is not None) == is_json, raw


# -- settings (tests/unit/test_raw_sink_settings.py has the rest) --------------------------------------


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch):
    for name in (*RAW_SINK_VARIABLES.values(), *DEPRECATED_RAW_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONSUMER_RAW_BUCKET", "lake-raw")
    return monkeypatch


# -- a bucket that does not exist ------------------------------------------------------------------------


class _NoBucket:
    def __init__(self) -> None:
        self.calls = 0

    def put_object(self, **kwargs: Any) -> None:
        self.calls += 1
        raise ClientError(
            {"Error": {"Code": "NoSuchBucket", "Message": "The specified bucket does not exist"}}, "PutObject"
        )


def test_missing_bucket_is_one_short_line_however_often_the_flush_retries(env, caplog):
    client = _NoBucket()
    sink = RawS3Sink(client=client, bucket="no-such-bucket-x1", max_age=0.01)
    sink._buffers[("2026-11-21", "01")] = _Buffer(records=[_record(b"{}")], lines=[b"{}\n"], size=3)
    with pytest.raises(MissingResourceError, match="no-such-bucket-x1"):
        sink._write(("2026-11-21", "01"))
    caplog.set_level(logging.WARNING, logger="consumer.sinks.raw_s3")
    for _ in range(20):
        try:
            sink._write(("2026-11-21", "01"))
        except Exception as exc:
            sink._flush_failed(exc)
    lines = [r for r in caplog.records if getattr(r, "event", None) == "raw_flush_failed"]
    assert len(lines) == 1 and client.calls == 21
    [line] = lines
    assert line.exc_info is None and "\n" not in line.getMessage()
    assert "no-such-bucket-x1" in line.getMessage() and "does not exist" in line.getMessage()
    assert sink._buffers  # kept for the next attempt: nothing is lost or marked done


def test_base64_of_binary_is_standard_padded_base64():
    parsed = _strict_loads(encode_line(_record(b"\xff\xfe\x00"), epoch=1))
    assert parsed["data_base64"] == base64.b64encode(b"\xff\xfe\x00").decode() == "//4A"


class _Timers:
    def __init__(self) -> None:
        self.due: list[tuple[float, Any]] = []

    def call_later(self, delay: float, callback: Any) -> None:
        self.due.append((delay, callback))

    def fire(self) -> None:
        due, self.due = self.due, []
        for _, callback in due:
            callback()


class _Puts:
    def __init__(self) -> None:
        self.keys: list[str] = []

    def put_object(self, **kwargs: Any) -> None:
        self.keys.append(kwargs["Key"])


def test_the_age_flush_is_a_timer_on_the_shards_lane_not_a_thread(env):
    client, timers = _Puts(), _Timers()
    sink = RawS3Sink(client=client, bucket="bucket-x1", max_age=2.0)
    threads = threading.active_count()
    guard = SimpleNamespace(ensure_valid=lambda: None)
    sink.initialize(SimpleNamespace(guard=guard, epoch=1, shard_id="shardId-0", timers=timers))
    assert threading.active_count() == threads  # no thread of its own
    assert [d for d, _ in timers.due] == [0.5]  # a quarter of the age (at most a second)
    [record] = OrderedTracker().track([_record(b"{}")])  # manual mode, as the worker delivers: done() works
    sink.process_records(SimpleNamespace(records=[record]))
    timers.fire()  # too young: kept, and the timer armed again
    assert client.keys == [] and len(timers.due) == 1
    for buffer in sink._buffers.values():
        buffer.born -= 2.0
    timers.fire()
    assert len(client.keys) == 1 and not sink._buffers and len(timers.due) == 1
    sink.shutdown_requested(SimpleNamespace(checkpointer=SimpleNamespace(checkpoint=lambda: None)))
    timers.fire()  # stopped: no more ticks
    assert timers.due == []
