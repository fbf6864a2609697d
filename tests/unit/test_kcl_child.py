"""A MultiLang child's stderr reaches the daemon's log a line at a time, however the pipe cuts it; text
without a newline (amazon-kclpy's sample writes so) once the child goes quiet."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from consumer.multilang.child import Child
from tests.unit.helpers import wait_until

# Writes text without a newline, waits for the test's go-ahead on stdin, then three lines in one write,
# then a last text without a newline, and exits.
_CHILD = r"""
import sys
sys.stderr.write("Record (Partition Key: a)"); sys.stderr.flush()
sys.stdin.readline()
sys.stderr.write("line one\nline two\nline \u00e9 three\nno newline at exit"); sys.stderr.flush()
"""


def test_child_stderr_is_logged_one_event_per_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="consumer.multilang.child")

    def lines() -> list[str]:
        return [
            str(getattr(r, "text", "")) for r in caplog.records if getattr(r, "event", "") == "child_stderr"
        ]

    child = Child([sys.executable, "-c", _CHILD], tmp_path, "shardId-000000000000")
    # The child waits for us after text without a newline: it is logged all the same.
    wait_until(lambda: lines() == ["Record (Partition Key: a)"], timeout=10, what="the text without newline")
    child.send(b"go\n", timeout=5)
    assert child.close(timeout=10) == 0
    assert lines() == [
        "Record (Partition Key: a)",
        "line one\n",
        "line two\n",
        "line \u00e9 three\n",
        "no newline at exit",
    ]
