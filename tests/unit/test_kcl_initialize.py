"""A shard that starts just before a record (``import-kcl`` of a TRIM_HORIZON/AT_TIMESTAMP lease, a replay):
the child is not told that record is done, and checkpointing where initialize said is a no-op, as in the KCL."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput, ShutdownRequestedInput
from consumer.multilang.processor import MultiLangProcessor
from consumer.multilang.properties import MultiLangSettings
from consumer.records import Position, Record
from tests.support.multilang_fakes import AlwaysValidGuard, RecordingCheckpointer

# A child that, like many, skips what its initialize position says is done, and checkpoints there once.
_CHILD = r"""
import json, sys
start = None
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if m["action"] == "initialize":
        start = (int(m["sequenceNumber"]), m["subSequenceNumber"])
    if m["action"] == "shutdownRequested":
        print(json.dumps({"action": "checkpoint", "sequenceNumber": str(start[0]), "subSequenceNumber": start[1]}))
        sys.stdout.flush()
        answer = json.loads(sys.stdin.readline())
        sys.stderr.write("checkpoint at start: %s\n" % answer.get("error"))
    for r in m.get("records", []):
        done = (int(r["sequenceNumber"]), r["subSequenceNumber"]) <= start
        sys.stderr.write("%s %s\n" % ("skip" if done else "got", r["sequenceNumber"]))
    sys.stderr.flush()
    print(json.dumps({"action": "status", "responseFor": m["action"]}))
    sys.stdout.flush()
"""


def test_a_start_just_before_a_record_delivers_it_to_the_child(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="consumer.multilang.child")
    (tmp_path / "child.py").write_text(_CHILD)
    settings = MultiLangSettings(
        source="t",
        command=(sys.executable, "child.py"),
        workdir=tmp_path,
        application="a",
        stream="s",
        response_timeout=10.0,
    )
    first = "49680634012571701483291317876783644735669578623155699714"
    p = MultiLangProcessor(settings)
    start = Position(first, -1)  # what import-kcl stores for a TRIM_HORIZON lease
    p.initialize(InitializationInput("s", "shardId-0", 1, start, "LATEST", AlwaysValidGuard()))
    cp = RecordingCheckpointer()
    at = datetime(2024, 1, 1, tzinfo=UTC)
    record = Record("s", "shardId-0", first, 0, "k", b"x", at)
    batch = ProcessRecordsInput([record], cp, 1, 0, AlwaysValidGuard())  # type: ignore[arg-type]
    p.process_records(batch)
    p.shutdown_requested(ShutdownRequestedInput(cp, 1))  # type: ignore[arg-type]
    said = "".join(
        str(getattr(r, "text", "")) for r in caplog.records if getattr(r, "event", "") == "child_stderr"
    )
    assert f"got {first}\n" in said and "skip" not in said, said
    assert "checkpoint at start: None\n" in said and cp.written == [], said  # a no-op, not an error
