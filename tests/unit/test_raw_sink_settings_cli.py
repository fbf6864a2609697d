"""Every wrong ``CONSUMER_RAW_*`` value stops ``python -m consumer run`` with one line naming the variable, exit 2,
no traceback. The CLI runs in-process (``consumer.cli.main``: the settings are checked before any AWS call), and
once in a subprocess, as an operator runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from consumer.cli import main

from .helpers import raw_sink_env

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    ("CONSUMER_RAW_BUCKET", ""),
    ("CONSUMER_RAW_BUCKET", "Lake_Raw"),
    ("CONSUMER_RAW_BUCKET", "s3://lake-raw/raw"),
    ("CONSUMER_RAW_PREFIX", "raw//landing"),  # an empty folder: s3://b/raw//landing is read as raw/landing
    ("CONSUMER_RAW_PREFIX", "raw/../landing"),  # a '..' folder: path tools read it as landing/
    ("CONSUMER_RAW_PREFIX", "./raw"),
    ("CONSUMER_RAW_PREFIX", "raw landing"),  # characters S3 says to avoid in keys
    ("CONSUMER_RAW_PREFIX", "raw\\landing"),
    ("CONSUMER_RAW_PREFIX", "raw/{date}"),
    ("CONSUMER_RAW_PREFIX", "r" * 600),  # keys are at most 1,024 bytes
    ("CONSUMER_RAW_MAX_BYTES", "0"),
    ("CONSUMER_RAW_MAX_BYTES", "-5"),
    ("CONSUMER_RAW_MAX_BYTES", "5MiB"),
    ("CONSUMER_RAW_MAX_BYTES", str(6 * 1024**3)),  # above what one PUT takes (5 GiB)
    ("CONSUMER_RAW_MAX_BYTES", str(2 * 1024**3)),  # above the 1 GiB a shard may hold per hour
    ("CONSUMER_RAW_MAX_RECORDS", "0"),
    ("CONSUMER_RAW_MAX_RECORDS", "1.5"),
    ("CONSUMER_RAW_MAX_AGE_SECONDS", "0"),
    ("CONSUMER_RAW_MAX_AGE_SECONDS", "-1"),
    ("CONSUMER_RAW_MAX_AGE_SECONDS", "nan"),
    ("CONSUMER_RAW_MAX_AGE_SECONDS", "inf"),
    ("CONSUMER_RAW_MAX_AGE_SECONDS", "1m"),
]


def _run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], **settings: str
) -> tuple[int, str]:
    """``python -m consumer run`` in-process with ``settings``: its exit code and stderr."""
    for key in list(os.environ):
        if key.startswith(("CONSUMER_", "RAW_", "AWS_")):
            monkeypatch.delenv(key)
    for key, value in raw_sink_env(**settings).items():
        monkeypatch.setenv(key, value)
    code = main(["run"])
    return code, capsys.readouterr().err


def _subprocess(**settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", "run"],
        check=False,
        cwd=ROOT,
        env=raw_sink_env(**settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(("variable", "value"), BAD, ids=lambda v: str(v)[:40])
def test_a_wrong_raw_setting_is_one_line_naming_it_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str
) -> None:
    code, err = _run(monkeypatch, capsys, **{variable: value})
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-2000:]
    assert errors[0].startswith(f"error: {variable}: "), errors[0]


def test_the_real_cli_refuses_a_wrong_prefix_in_one_line() -> None:
    done = _subprocess(CONSUMER_RAW_PREFIX="raw//landing")
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: CONSUMER_RAW_PREFIX: "), done.stderr[-2000:]


def test_a_good_prefix_and_the_largest_max_bytes_pass_the_settings() -> None:
    """The same run with good values gets past the settings (to the unreachable endpoint)."""
    done = _subprocess(CONSUMER_RAW_PREFIX="lake/env=prod/raw-v2/", CONSUMER_RAW_MAX_BYTES=str(1024**3))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "CONSUMER_RAW_" not in done.stderr, done.stderr[-2000:]
