"""A MultiLang child that does not answer ``shutdownRequested`` cannot hold the daemon's stop past the
worker's shutdown deadline (which the container's stop timeout is sized for): its time is cut to fit, with
one warning naming ``gracefulLeaseHandoffTimeoutMillis``."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.kclpy_support import events, spawn_daemon
from tests.integration.support import create_stream, make_names, put_records
from tests.unit.helpers import wait_until

pytestmark = pytest.mark.integration

# Answers every message, except shutdownRequested: it hangs there.
_CHILD = r"""#!/usr/bin/env python3
import json, sys, time
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    sys.stderr.write("got %s\n" % m["action"])
    sys.stderr.flush()
    if m["action"] == "shutdownRequested":
        time.sleep(120)
    print(json.dumps({"action": "status", "responseFor": m["action"]}))
    sys.stdout.flush()
"""


def test_a_child_hung_in_shutdown_requested_does_not_hold_the_stop_past_the_deadline(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_records(kinesis_client, names.stream, [b"a"])
    child = tmp_path / "child.py"
    child.write_text(_CHILD.replace("/usr/bin/env python3", sys.executable))
    child.chmod(0o755)
    path = tmp_path / "app.properties"
    path.write_text(
        f"executableName = child.py\nstreamName = {names.stream}\napplicationName = {unique_name('app')}\n"
        "initialPositionInStream = TRIM_HORIZON\ngracefulLeaseHandoffTimeoutMillis = 30000\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONSUMER_")}
    env.update(
        emulators.env(),
        CONSUMER_SHUTDOWN_DEADLINE_SECONDS="6",
        CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS="2",
        CONSUMER_IDLE_TIME_SECONDS="0.2",
    )
    log = tmp_path / "daemon.log"
    proc = spawn_daemon(path, names, env, "w1", log)
    try:
        wait_until(
            lambda: (
                proc.poll() is not None
                or any("got processRecords" in str(e.get("text")) for e in events(log))
            ),
            timeout=45,
            what="the record given to the child",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        proc.wait(30)
        took = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    said = events(log)
    capped = [e for e in said if e.get("event") == "multilang_setting_capped"]
    assert len(capped) == 1 and capped[0]["key"] == "gracefulLeaseHandoffTimeoutMillis", capped
    assert capped[0]["used_s"] == 4.0
    failed = [e for e in said if e.get("event") == "child_failed"]
    assert failed and failed[0]["during"] == "shutdownRequested", failed
    assert "no answer within 4s" in failed[0]["error"], failed
    assert took < 6 + 3, f"the stop took {took:.1f}s, past the 6s deadline"
