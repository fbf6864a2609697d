"""SIGTERM while ``python -m consumer run`` starts up (ECS stops a task that is still starting): a clean stop,
exit 0 and one log line, no traceback. Before, the signal came before the worker's handlers existed and killed
the process silently (exit 143, nothing logged)."""

from __future__ import annotations

import json
import os
import signal

import pytest

from tools.tcp_proxy import FaultProxy

from .support import PROCESS_START, make_names, spawn_worker, wait_until

pytestmark = pytest.mark.integration


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask, /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = next(line for line in status if line.startswith("SigCgt:"))
    except (FileNotFoundError, StopIteration):
        return False
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def test_sigterm_during_the_start_up_checks_stops_cleanly(emulators, dynamodb_client, unique_name, tmp_path):
    names = make_names(unique_name, dynamodb_client)
    port = int(emulators.kinesis_endpoint.rsplit(":", 1)[1])
    journal = tmp_path / "j.jsonl"
    with FaultProxy(("127.0.0.1", port)) as kinesis, kinesis.outage("black_hole"):
        # The start-up checks call Kinesis, which answers nothing: run is held in its start-up.
        proc = spawn_worker(emulators, names, "w", journal, AWS_ENDPOINT_URL_KINESIS=kinesis.url())
        try:
            wait_until(lambda: _catches_sigterm(proc.pid), PROCESS_START, what="run's start-up handler")
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    log = journal.with_suffix(".w.log").read_text()
    assert "Traceback" not in log, log
    [line] = [json.loads(x) for x in log.splitlines() if '"stopped_before_start"' in x]
    assert line["level"] == "WARNING", line
    assert not dynamodb_client.scan(TableName=names.lease_table)["Items"]  # never registered
