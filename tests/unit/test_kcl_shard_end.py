"""``shardEnded`` answered without a SHARD_END checkpoint: the daemon says so in the child's terms."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput, ShardEndedInput
from consumer.multilang.processor import MultiLangProcessor
from consumer.multilang.properties import MultiLangSettings
from consumer.records import SHARD_END, Record
from tests.support.multilang_fakes import AlwaysValidGuard, RecordingCheckpointer

# Answers every message; at shardEnded it checkpoints SHARD_END only when its argument says so.
_CHILD = r"""
import json, sys
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if m["action"] == "shardEnded" and sys.argv[1] == "checkpoint":
        print(json.dumps({"action": "checkpoint", "sequenceNumber": None, "subSequenceNumber": None}))
        sys.stdout.flush()
        sys.stdin.readline()
    print(json.dumps({"action": "status", "responseFor": m["action"]}))
    sys.stdout.flush()
"""


@pytest.mark.parametrize("child_does", ["checkpoint", "nothing"])
def test_shard_end_without_checkpoint_is_named_for_the_child(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, child_does: str
) -> None:
    caplog.set_level(logging.INFO, logger="consumer.multilang.processor")
    (tmp_path / "child.py").write_text(_CHILD)
    settings = MultiLangSettings(
        source="t",
        command=(sys.executable, "child.py", child_does),
        workdir=tmp_path,
        application="a",
        stream="s",
        response_timeout=10.0,
    )
    p = MultiLangProcessor(settings)
    p.initialize(InitializationInput("s", "shardId-0", 1, None, "TRIM_HORIZON", AlwaysValidGuard()))
    cp = RecordingCheckpointer()
    at = datetime(2024, 1, 1, tzinfo=UTC)
    record = Record("s", "shardId-0", "5", 0, "k", b"x", at)
    batch = ProcessRecordsInput([record], cp, 1, 0, AlwaysValidGuard())  # type: ignore[arg-type]
    p.process_records(batch)
    p.shard_ended(ShardEndedInput(cp, 1))  # type: ignore[arg-type]
    said = [r for r in caplog.records if getattr(r, "event", "") == "multilang_shard_end_not_checkpointed"]
    if child_does == "checkpoint":
        assert cp.written == [SHARD_END] and said == []
    else:
        assert cp.written == [] and len(said) == 1 and said[0].levelno == logging.ERROR
        assert "in shard_ended (amazon-kclpy v3) or in shutdown with reason TERMINATE (v2)" in str(
            getattr(said[0], "hint", "")
        )
