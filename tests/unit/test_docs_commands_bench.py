"""The commands docs/benchmarks.md and README.md name (``python -m bench.<x>``, ``python -m tools.demo``), run as a
user runs them: a bad flag or value is one line naming it (exit 2, no traceback, nothing run or written), the
fleet report finds its JSON from any folder, and a data-path trial's peak RSS is its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reports" / "bench"  # bench.REPORTS (no test imports bench: test_import_direction.py)


def _run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv_ = [sys.executable, "-m", *argv]
    return subprocess.run(argv_, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["bench.faults", "--runs", "0"], "--runs"),  # ran nothing and wrote an empty faults.json, exit 0
        (["bench.fleet", "--scenarios", "scale_cycles,bogus"], "bogus"),  # KeyError once the emulators ran
        (["bench.fleet", "--handoffs", "0"], "--handoffs"),
        (["bench.drain", "--repeats", "0"], "--repeats"),  # StatisticsError after the trials
        (["bench.multilang", "--records", "-5"], "--records"),  # IndexError after a trial
        (["bench.coordination", "--skip-real", "--real-only"], "--real-only"),  # ran nothing, wrote empty
        (["bench.coordination", "--wall-budget", "nan"], "--wall-budget"),
        (["bench.datapath", "--rest", "0", "--shard-counts", "4"], "--rest"),
        (["bench.datapath", "--bogus"], "--bogus"),  # argparse's usage block
        (["bench.at_rest", "--seconds", "-1"], "--seconds"),
        (["bench.pipeline", "--sizes", "x"], "--sizes"),
        (["tools.demo", "--out", "/dev/null/demo"], "--out"),  # NotADirectoryError's traceback
    ],
)
def test_a_bad_flag_or_value_is_one_line(argv: list[str], named: str) -> None:
    out = _run(*argv)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: python -m {argv[0]}: "), out.stderr
    assert named in lines[0]
    assert out.stdout == ""


def test_the_fleet_report_reads_the_benchmarks_json_from_any_folder(tmp_path: Path) -> None:
    out = _run("bench.fleet_report", cwd=tmp_path)
    if (REPORTS / "fleet.json").exists():
        assert out.returncode == 0, out.stderr
        assert "| transition |" in out.stdout
    else:  # named by its place in the repository, not the folder the command ran in
        assert out.returncode == 2 and str(REPORTS / "fleet.json") in out.stderr, out.stderr


def test_a_trials_peak_rss_is_its_own_not_its_parents(tmp_path: Path) -> None:
    """``ru_maxrss`` carries over ``exec``: a trial started by a larger process reported that one's peak."""
    result = tmp_path / "result.json"
    spec = {"name": "rss", "backend": "memory", "shards": 1, "records": 100, "kpl": False}
    spec |= {"per_aggregate": 100, "kind": "bare", "stream": "", "idle": 0.0, "limit": 100}
    parent = textwrap.dedent(
        f"""
        import subprocess, sys
        ballast = bytearray(400 * 2**20)
        ballast[:: 4096] = b"x" * len(ballast[:: 4096])  # 400 MB resident
        subprocess.Popen([sys.executable, "-m", "bench.datapath_trial", {json.dumps(spec)!r}]).wait()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "DATAPATH_TARGET": "100", "DATAPATH_RESULT": str(result)}
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (result.exists() and result.read_text()):  # the trial writes it once it read the backlog
            assert proc.poll() is None and time.monotonic() < deadline, "the trial did not read its backlog"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    peak = json.loads(result.read_text())["peak_rss_mb"]
    assert 10 < peak < 300, peak  # the trial's own (about 45 MB), not the parent's 400 MB
