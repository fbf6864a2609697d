"""Running the real amazon-kclpy client (``tools.kclpy``: its sdist, pinned by version and hash) under
``python -m consumer multilang`` in the tests, and reading back what its apps did from the daemon's logs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.integration.support import LEASES, REPO, Names
from tools.kclpy import fetch_kclpy

__all__ = [
    "child_stderr",
    "daemon_env",
    "events",
    "fetch_kclpy",
    "sample_properties",
    "sample_records",
    "spawn_daemon",
]

_SAMPLE_RECORD = re.compile(
    rb"Record \(Partition Key: (?P<pk>[^,]*), Sequence Number: (?P<seq>\d+), "
    rb"Subsequence Number: (?P<sub>\d+), Data Size: (?P<size>\d+)"
)


def sample_properties(kclpy: Path, stream: str, region: str, into: Path) -> Path:
    """The sample's properties with only the stream (name and ARN) and the region changed, written beside
    the sample app (``executableName = sample_kclpy_app.py`` names it relative to the file)."""
    text = (kclpy / "samples" / "sample.properties").read_text()
    text, n1 = re.subn(r"(?m)^streamName = .*$", f"streamName = {stream}", text)
    text, n2 = re.subn(
        r"(?m)^streamArn = arn:aws:kinesis:[^:]+:(\d+):stream/.*$",
        lambda m: f"streamArn = arn:aws:kinesis:{region}:{m.group(1)}:stream/{stream}",
        text,
    )
    text, n3 = re.subn(r"(?m)^regionName = .*$", f"regionName = {region}", text)
    assert (n1, n2, n3) == (1, 1, 1), "the sample's properties changed shape"
    path = into / "test.properties"
    path.write_text(text)
    return path


def daemon_env(emulators: Any, kclpy: Path, **extra: str) -> dict[str, str]:
    """The daemon's environment: the emulators, the test's lease timings, amazon_kclpy importable by the
    children and this interpreter's ``python`` first on PATH (the sample starts with ``#!/usr/bin/env python``)."""
    return {
        **os.environ,
        **emulators.env(),
        "PYTHONPATH": str(kclpy),
        "PYTHONUNBUFFERED": "1",  # the children's stderr arrives as written (the tests wait on it)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "CONSUMER_LEASE_DURATION_SECONDS": str(LEASES.lease_duration),
        "CONSUMER_SAFETY_MARGIN_SECONDS": str(LEASES.safety_margin),
        "CONSUMER_SCAN_INTERVAL_SECONDS": str(LEASES.scan_interval),
        "CONSUMER_INBOX_POLL_SECONDS": str(LEASES.inbox_poll_interval),
        "CONSUMER_IDLE_POLL_SECONDS": str(LEASES.idle_poll_interval),
        "CONSUMER_LEADER_CHECK_SECONDS": str(LEASES.leader_check_interval),
        "CONSUMER_DISCOVERY_INTERVAL_SECONDS": "0.5",
        "CONSUMER_IDLE_TIME_SECONDS": "0.2",
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "15",
        **extra,
    }


def spawn_daemon(
    properties: Path, names: Names, env: dict[str, str], worker_id: str, log: Path
) -> subprocess.Popen[bytes]:
    """``python -m consumer multilang <properties>`` as its own process, logs (JSON lines) to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "consumer",
                "multilang",
                str(properties),
                "--lease-table",
                names.lease_table,
                "--checkpoint-table",
                names.checkpoint_table,
            ],
            cwd=REPO,
            env={**env, "CONSUMER_WORKER_ID": worker_id},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def events(log: Path) -> list[dict[str, Any]]:
    """The daemon's JSON log events (other lines skipped)."""
    out = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def child_stderr(logs: list[Path]) -> dict[int, bytes]:
    """Each child's stderr (by pid), joined in order from the daemons' ``child_stderr`` events."""
    by_pid: dict[int, bytes] = defaultdict(bytes)
    for log in logs:
        for e in events(log):
            if e.get("event") == "child_stderr":
                by_pid[int(e["pid"])] += e["text"].encode()
    return dict(by_pid)


def sample_records(logs: list[Path]) -> list[tuple[int, str, int]]:
    """What the sample app processed: (pid, sequence number, sub-sequence) per record, from its stderr."""
    out = []
    for pid, text in child_stderr(logs).items():
        out += [(pid, m["seq"].decode(), int(m["sub"])) for m in _SAMPLE_RECORD.finditer(text)]
    return out
