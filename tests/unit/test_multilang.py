"""The MultiLang pieces without processes: the properties mapping, the protocol lines, explicit checkpoints."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from consumer.checkpoint.policy import ExplicitCheckpoints
from consumer.errors import ConfigError
from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput, ShutdownRequestedInput
from consumer.multilang import protocol
from consumer.multilang.child import ChildFailed
from consumer.multilang.processor import MultiLangProcessor
from consumer.multilang.properties import KEYS, MultiLangSettings, parse_properties, parse_text
from consumer.records import Position, Record
from tests.support.multilang_fakes import AlwaysValidGuard, RecordingCheckpointer

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


_CHILD = r"""
import json, sys
# Answers every message; checkpoints the record whose data is "cp" (base64 "Y3A="); exits on "die" ("ZGll")
# the first time it sees it (a marker file says whether it already did).
import os
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    sys.stderr.write("got %s %s %s\n" % (m["action"], m.get("sequenceNumber"), [r["data"] for r in m.get("records", [])]))
    sys.stderr.flush()
    for r in m.get("records", []):
        if r["data"] == "ZGll" and not os.path.exists("died"):
            open("died", "w").close()
            sys.exit(7)
        if r["data"] == "Y3A=":
            print(json.dumps({"action": "checkpoint", "sequenceNumber": r["sequenceNumber"], "subSequenceNumber": 0}))
            sys.stdout.flush()
            sys.stdin.readline()
    print(json.dumps({"action": "status", "responseFor": m["action"]}))
    sys.stdout.flush()
"""


def _processor(tmp_path: Path) -> tuple[MultiLangProcessor, RecordingCheckpointer]:
    (tmp_path / "child.py").write_text(_CHILD)
    settings = MultiLangSettings(
        source="t",
        command=(sys.executable, "child.py"),
        workdir=tmp_path,
        application="a",
        stream="s",
        backoff_base=0.01,
        response_timeout=10.0,
    )
    p = MultiLangProcessor(settings)
    p.initialize(InitializationInput("s", "shardId-0", 1, None, "TRIM_HORIZON", AlwaysValidGuard()))
    return p, RecordingCheckpointer()


def _batch(cp: RecordingCheckpointer, *items: tuple[int, bytes]) -> ProcessRecordsInput:
    at = datetime(2024, 1, 1, tzinfo=UTC)
    records = [Record("s", "shardId-0", str(seq), 0, "k", data, at) for seq, data in items]
    return ProcessRecordsInput(records, cp, 1, 0, AlwaysValidGuard())  # type: ignore[arg-type]


def test_a_restarted_child_gets_every_record_after_the_checkpoint_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="consumer.multilang.child")
    p, cp = _processor(tmp_path)
    p.process_records(_batch(cp, (10, b"a"), (11, b"cp"), (12, b"b")))
    assert cp.written == [Position("11", 0)]  # only what the child asked for
    with pytest.raises(ChildFailed, match="exited with code 7"):
        p.process_records(_batch(cp, (13, b"c"), (14, b"die"), (15, b"d")))
    p.process_records(_batch(cp, (13, b"c"), (14, b"die"), (15, b"d")))  # the consumer's retry
    p.shutdown_requested(ShutdownRequestedInput(cp, 1))  # type: ignore[arg-type]
    assert cp.written == [Position("11", 0)]  # the child never asked again: nothing more written
    said = "".join(r.__dict__["text"] for r in caplog.records if r.__dict__.get("event") == "child_stderr")
    # the new child: initialize at the checkpoint, then 12 again (given before the crash), then the retried batch
    assert (
        "got initialize 11 []\ngot processRecords None ['Yg==']\ngot processRecords None ['Yw==', 'ZGll', 'ZA==']"
        in said
    )


def test_past_the_cap_a_restart_stops_at_the_checkpoint_rather_than_skip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("consumer.multilang.processor.MAX_UNCONFIRMED", 2)
    p, cp = _processor(tmp_path)
    p.process_records(_batch(cp, (10, b"a"), (11, b"b"), (12, b"c")))  # 3 unconfirmed: 10 let go of
    with pytest.raises(ChildFailed, match="exited with code 7"):
        p.process_records(_batch(cp, (13, b"die")))
    with pytest.raises(ChildFailed, match=r"cannot restart: records after the checkpoint None up to 10/0"):
        p.process_records(_batch(cp, (13, b"die")))


@pytest.mark.parametrize(
    ("encoding", "bom"), [("utf-8", b""), ("utf-8", b"\xef\xbb\xbf"), ("iso-8859-1", b""), ("utf-16", b"")]
)
def test_a_properties_file_in_the_encodings_editors_save_reads_the_same(
    tmp_path: Path, encoding: str, bom: bytes
) -> None:
    """Java reads .properties as ISO-8859-1; editors save UTF-8 (with or without a mark) or UTF-16."""
    from consumer.multilang.properties import read_properties

    text = "# café\nexecutableName = python3 app.py\nstreamName = orders\napplicationName = café-app\n"
    path = tmp_path / "app.properties"
    path.write_bytes(bom + text.encode(encoding))
    settings = read_properties(path)
    assert (settings.application, settings.stream, settings.command) == (
        "café-app",
        "orders",
        ("python3", "app.py"),
    )
