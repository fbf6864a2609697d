"""The MultiLang pieces without processes: the properties mapping, the protocol lines, explicit checkpoints."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from consumer.checkpoint.policy import ExplicitCheckpoints
from consumer.errors import ConfigError
from consumer.multilang import protocol
from consumer.multilang.properties import KEYS, parse_properties, parse_text
from consumer.records import Position, Record

REPO = Path(__file__).resolve().parents[2]


def test_the_guide_lists_every_key_with_its_fate() -> None:
    doc = (REPO / "docs" / "migrating-from-kcl.md").read_text()
    missing = [key for key in KEYS if f"| `{key}` |" not in doc]
    assert missing == []


def test_a_sample_like_file_maps_to_settings() -> None:
    text = """
# comment
executableName = sample_kclpy_app.py
streamArn = arn:aws:kinesis:eu-west-1:000000000000:stream/orders
streamName = ignored-when-arn
applicationName = App
AwsCredentialsProvider = DefaultCredentialsProvider
processingLanguage = python/3.8
initialPositionInStreamExtended = 1636609142
regionName = eu-west-1
failoverTimeMillis = 7000
idleTimeBetweenReadsInMillis = 500
maxRecords = 250
timeoutInSeconds = 5
"""
    s = parse_properties(parse_text(text, "app.properties"), "app.properties", Path("/x"))
    assert (s.stream, s.region, s.application, s.command) == (
        "orders",
        "eu-west-1",
        "App",
        ("sample_kclpy_app.py",),
    )
    assert (s.initial_position, s.initial_timestamp) == (
        "AT_TIMESTAMP",
        datetime.fromtimestamp(1636609142, UTC),
    )
    assert (s.lease_duration, s.idle_time_between_reads, s.max_records, s.response_timeout) == (
        7.0,
        0.5,
        250,
        5.0,
    )
    assert [k for k, _ in s.ignored] == ["AwsCredentialsProvider", "processingLanguage"]


def test_refused_values_name_the_key() -> None:
    props = {
        "executableName": "x",
        "streamName": "s",
        "applicationName": "a",
        "maxThroughputPerHostKBps": "10",
    }
    with pytest.raises(ConfigError, match=r"^f: maxThroughputPerHostKBps: '10' is refused"):
        parse_properties(props, "f", Path("/x"))
    with pytest.raises(ConfigError, match=r"^f:3: not a 'key = value' line"):
        parse_text("a = 1\n\n=oops\n", "f")


def test_child_lines() -> None:
    assert protocol.parse_child_line(b"\n") is None
    assert protocol.parse_child_line(
        b'{"action": "status", "responseFor": "initialize"}\n'
    ) == protocol.StatusReply("initialize")
    req = protocol.parse_child_line(b'{"action":"checkpoint","sequenceNumber":"42","subSequenceNumber":3}')
    assert isinstance(req, protocol.CheckpointRequest) and req.position == Position("42", 3)
    everything = protocol.parse_child_line(
        b'{"action":"checkpoint","sequenceNumber":null,"subSequenceNumber":null}'
    )
    assert isinstance(everything, protocol.CheckpointRequest) and everything.position is None
    for garbage in (b"hello", b"[1]", b'{"action": "dance"}', b'{"action": "status"}'):
        with pytest.raises(protocol.ProtocolError):
            protocol.parse_child_line(garbage)
    reply = json.loads(protocol.checkpoint_reply(req, protocol.SHUTDOWN))
    assert reply == {
        "action": "checkpoint",
        "sequenceNumber": "42",
        "subSequenceNumber": 3,
        "error": "ShutdownException",
    }


def test_records_line_is_what_kclpy_reads() -> None:
    r = Record("s", "shardId-0", "123", 2, 'k"é', b"\x00\xff", datetime(2024, 1, 1, tzinfo=UTC))
    line = json.loads(protocol.process_records([protocol.record_json(r)], 7))
    assert line == {
        "action": "processRecords",
        "millisBehindLatest": 7,
        "records": [
            {
                "action": "record",
                "data": "AP8=",
                "partitionKey": 'k"é',
                "sequenceNumber": "123",
                "subSequenceNumber": 2,
                "approximateArrivalTimestamp": 1704067200000,
            }
        ],
    }
    init = json.loads(protocol.initialize("shardId-0", None, "TRIM_HORIZON"))
    assert init == {
        "action": "initialize",
        "shardId": "shardId-0",
        "sequenceNumber": "TRIM_HORIZON",
        "subSequenceNumber": 0,
    }


def test_explicit_checkpoints_write_nothing_by_themselves() -> None:
    policy = ExplicitCheckpoints()
    r = Record("s", "sh", "1", 0, "k", b"", datetime(2024, 1, 1, tzinfo=UTC))
    assert policy.track([r]) == [r]
    policy.delivered([r], [])
    assert policy.position() is None and policy.pending == 0  # nothing for a stop to write or wait for
