"""``python -m consumer multilang app.properties --check`` refuses what the start refuses, in the same line and
exit code, naming the file's key rather than ``CONSUMER_*`` variables the file's author never set; and the
KCL 3.x default of ``leaseAssignmentIntervalMillis`` passes both, cut (audit D2). No AWS is needed: every case
is decided before the start-up checks (the endpoints point at a closed port, so nothing leaves the machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.support import error_lines, run_multilang

pytestmark = pytest.mark.integration

_FILE = "executableName = app.sh\nstreamName = orders\napplicationName = OrdersApp\nregionName = us-east-1\n"


def _multilang(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "AWS_"))}
    env.update(
        CONSUMER_LOG_LEVEL="WARNING",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
    )
    return run_multilang(path, *flags, env=env)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "failoverTimeMillis = 1000",
            "failoverTimeMillis: CONSUMER_LEADER_CHECK_SECONDS (1.0 s, its default) must be shorter than "
            "failoverTimeMillis (1000 ms): change failoverTimeMillis, or set CONSUMER_LEADER_CHECK_SECONDS",
        ),
        ("maxRecords = 20000", "maxRecords: must be 1..10000, got 20000"),
    ],
)
def test_check_refuses_what_the_start_refuses_in_the_files_terms(
    tmp_path: Path, line: str, expected: str
) -> None:
    """Before: ``--check`` exited 0 for each, and the start said ``CONSUMER_LEADER_CHECK_SECONDS: must be
    shorter than CONSUMER_LEASE_DURATION_SECONDS (1.0); got 1.0``."""
    (tmp_path / "app.sh").write_text("#!/bin/sh\n")
    (tmp_path / "app.sh").chmod(0o755)
    path = tmp_path / "app.properties"
    path.write_text(f"{_FILE}{line}\n")
    check, start = _multilang(path, "--check"), _multilang(path)
    assert (check.returncode, error_lines(check)) == (2, [f"error: {path}: {expected}"]), check.stderr
    assert (start.returncode, error_lines(start)) == (check.returncode, error_lines(check)), start.stderr
    assert check.stdout == "" and "Traceback" not in check.stderr + start.stderr


def test_check_shows_the_kcl3_default_lease_assignment_interval_cut(tmp_path: Path) -> None:
    (tmp_path / "app.sh").write_text("#!/bin/sh\n")
    (tmp_path / "app.sh").chmod(0o755)
    path = tmp_path / "app.properties"
    path.write_text(f"{_FILE}failoverTimeMillis = 10000\nleaseAssignmentIntervalMillis = 20000\n")
    out = _multilang(path, "--check")
    assert out.returncode == 0, out.stderr
    assert (
        "leaseAssignmentIntervalMillis = 20000  -> lease.scan_interval (the leader plans after each scan); "
        "cut to 5000 ms: the leader scans the lease table more often than a lease duration" in out.stdout
    ), out.stdout
