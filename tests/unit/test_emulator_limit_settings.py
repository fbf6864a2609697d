"""Limit settings that cannot be used stop ``python -m tools.emulators`` with one line naming the variable that
was set (docs/emulators.md), before any emulator starts: run as a user runs it, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("EMULATORS_LIMIT_GET_RECORDS_PER_SHARD", "inf"),  # an endless rate crashed the Kinesis proxy child
        ("EMULATORS_LIMIT_GET_RECORDS_PER_SHARD", "-1"),
        ("EMULATORS_LIMIT_SUBSCRIBE_TAKEOVER_SECONDS", "0"),
        ("EMULATORS_LIMIT_DYNAMODB_BURST_SECONDS", "nan"),
    ],
)
def test_bad_limit_is_one_line_naming_the_variable(variable: str, value: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMULATORS_")} | {variable: value}
    run = subprocess.run(
        [sys.executable, "-m", "tools.emulators"],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run.stderr
    [line] = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: {variable}={value}: "), line
    assert "Traceback" not in run.stderr and "kinesis-limits" not in run.stderr
    assert run.stdout == ""
