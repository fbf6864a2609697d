"""``make demo`` end to end (``--quick``) as a subprocess, and Ctrl-C stopping everything it started."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.integration.support import sigint_default
from tools.demo_dev import DemoNames, load_environment

pytestmark = pytest.mark.integration


REPO = Path(__file__).resolve().parents[2]
QUICK_LEASE_S = 4.0  # tools.demo.QUICK.lease_duration
QUICK_SCAN_S = 0.5
KEYS = 20  # tools.demo.KEYS: the producer's partition keys


def _demo(out: Path) -> list[str]:
    return [sys.executable, "-m", "tools.demo", "--quick", "--out", str(out)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable}


def test_quick_demo_runs_end_to_end_curates_every_record_once_and_keeps_each_keys_newest(
    tmp_path: Path,
) -> None:
    out = tmp_path / "demo"
    began = time.monotonic()
    proc = subprocess.run(
        _demo(out), cwd=REPO, env=_env(), capture_output=True, text=True, timeout=240, check=False
    )
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    s = json.loads((out / "summary.json").read_text())

    dev = load_environment("dev")
    assert s["environment"] == "dev"
    assert s["names"] == json.loads(json.dumps(asdict(DemoNames.of(dev))))  # named after dev in cdk.json
    assert s["settings"]["shards"] == dev.streams[0].shard_count
    assert s["records"]["produced"] > 500
    assert s["records"]["lost"] == 0
    assert s["records"]["drained"] is True
    assert s["concurrent_owner_overlaps"] == 0
    # at-least-once in raw, exactly once in curated
    assert s["raw"]["distinct"] == s["records"]["produced"]
    assert s["curated"]["rows"] == s["curated"]["distinct_produced"] == s["records"]["produced"]
    assert s["curated"]["missing"] == s["curated"]["unexpected"] == s["curated"]["duplicate_rows"] == 0
    assert s["curated"]["exactly_once"] is True
    assert s["curated"]["metrics_records"] == s["curated"]["rows"]  # aggregation saw every curated row
    # beside the raw sink, the processor dev deploys (cdk.json), with its own table: each key's newest record
    assert dev.consumer.processor_table is not None
    p = s["processor"]
    assert (p["entry_point"], p["project"]) == (dev.consumer.processor, dev.consumer.processor_project)
    assert p["table"] == s["names"]["processor_table"] is not None
    table = p["check"]
    assert table["records_produced"] == s["records"]["produced"]
    assert table["keys_produced"] == KEYS and table["keys_on_more_than_one_shard"] == 0
    assert table["rows"] == p["rows"] == KEYS
    assert table["missing_keys"] == table["unexpected_keys"] == table["not_newest"] == 0
    assert table["each_key_newest"] is True
    # refused as older than the stored record: only redeliveries can be (a shard's owner writes in order)
    refused = p["refused"]
    assert refused["older_after_crash"] <= refused["older_than_stored"] <= s["records"]["redelivered"]
    assert refused["stale_epoch"] == 0  # no owner of an older epoch wrote: hand-offs are cooperative
    probe = p["probe"]  # the example's own upsert as the previous epoch of a key's shard, after the run
    assert probe["probed"] is True and probe["write_epoch"] == probe["stored_epoch"] - 1
    assert probe["refused"] is True and "was written by epoch" in probe["error"]
    assert probe["item_unchanged"] is True
    # scale out, scale in and two rolling replacements each moved a lease by hand-off; one crash failover
    assert s["handoffs"]["n"] >= 3
    assert s["failover"]["n"] >= 1
    assert s["failover"]["max"] <= QUICK_LEASE_S + 2 + QUICK_SCAN_S
    assert all(code == 0 for code in s["exit_codes"].values())
    assert s["dead_lettered"] == 0
    assert s["waits_timed_out"] == []  # every phase's event came (the fleet formed, each hand-off finished)
    for png in ("ownership.png", "lag.png"):
        assert (out / png).stat().st_size > 10_000
    assert "demo summary" in proc.stdout and "curated rows" in proc.stdout
    assert f"latest-per-key table      {KEYS} rows" in proc.stdout
    print(f"quick demo: {took:.1f}s")


# ----------------------------------------------------------------------------------------------- Ctrl-C


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _cmdline(pid: int) -> str:
    try:
        return (
            (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _descendants(root: int) -> dict[int, str]:
    tree, found, todo = _children(), {}, [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            found[child] = _cmdline(child)
            todo.append(child)
    return found


def _alive(pid: int, cmdline: str) -> bool:
    """Still running as the same program (not a zombie, not a recycled pid)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and _cmdline(pid) == cmdline


def _read_lines(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line)


# Every kind of process the demo starts: the emulators, the workers and the Spark step's JVM (started at once,
# idle until the fleet's output is ready).
MUST_STOP = ("node", "_emulator_moto.py", "consumer run", "java")


def test_ctrl_c_stops_every_process_the_demo_started(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        _demo(tmp_path / "demo"),
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=sigint_default,  # noqa: PLW1509 - one signal() call: as in a terminal, whatever we do with SIGINT
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 150
        marker = "start w3"  # the fleet is scaling out
        while not any(marker in line for line in seen):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(seen)
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        # wait until every kind of process we want to see stopped is running, then press "Ctrl-C"
        while True:
            procs = _descendants(proc.pid)
            if all(any(kind in cmd for cmd in procs.values()) for kind in MUST_STOP):
                break
            assert time.monotonic() < deadline and proc.poll() is None, f"{procs}\n{''.join(seen)}"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)  # an upper bound for a hung demo; a loaded machine takes its time
    finally:
        if proc.poll() is None:
            proc.kill()
    while not lines.empty():
        seen.append(lines.get())
    output = "".join(seen)
    assert proc.returncode == 130, output
    assert "interrupted (Ctrl-C): stopping everything the demo started" in output
    deadline = time.monotonic() + 5  # children the demo SIGKILLed may take a moment to be reaped
    while (left := {p: c for p, c in procs.items() if _alive(p, c)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"still running after Ctrl-C: {left}"
