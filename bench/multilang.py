"""The MultiLang benchmark (``make bench-multilang``): a KCL MultiLang app next to the native API.

One backlog on kinesis-local, read in the same run (native, multilang, multilang, native, ...), each trial a
fresh application (its own tables) from TRIM_HORIZON: ``python -m consumer run`` with a counting processor
(auto checkpoints after each batch), and ``python -m consumer multilang`` running an amazon-kclpy 3.2.0 v3
app (``tools.kclpy``) that counts and checkpoints after each batch. Both at settings AWS allows: at least
0.2 s between GetRecords per shard. Measured from the first batch delivered to the last record: records/s,
CPU seconds per 100k records of the daemon process (every thread, ``/proc/<pid>/stat``; the children's own
CPU counted apart: it is the user's). Medians of the repeats; JSON on stdout and in
``reports/bench/multilang.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.multilang_apps import KCLPY_APP
from consumer.dynamo import create_tables

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) of ``pid`` itself, not of its children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _progress(path: Path) -> list[tuple[float, int]]:
    if not path.exists():
        return []
    return [(float(t), int(n)) for t, n in (line.split() for line in path.read_text().splitlines() if line)]


def _trial(kind: str, stream: str, records: int, env: dict[str, str], work: Path, ddb: Any) -> dict[str, Any]:
    app = f"ml-{kind}-{uuid.uuid4().hex[:6]}"
    leases, cps = f"{app}-leases", f"{app}-cps"
    create_tables(ddb, leases, cps)
    progress = work / f"{app}.progress"
    run_env = {
        **env,
        "BENCH_PROGRESS": str(progress),
        "CONSUMER_LEASE_TABLE": leases,
        "CONSUMER_CHECKPOINT_TABLE": cps,
        "CONSUMER_LOG_LEVEL": "WARNING",
        "CONSUMER_METRICS_INTERVAL_SECONDS": "60",
    }
    if kind == "native":
        run_env |= {"CONSUMER_APPLICATION": app, "CONSUMER_STREAMS": stream}
        run_env["CONSUMER_PROCESSOR"] = "bench.multilang_apps:Counter"
        cmd = [sys.executable, "-m", "consumer", "run"]
    else:
        props = work / f"{app}.properties"
        props.write_text(
            f"executableName = {sys.executable} app.py\nstreamName = {stream}\napplicationName = {app}\n"
            f"initialPositionInStream = TRIM_HORIZON\nregionName = {env['AWS_REGION']}\n"
        )
        cmd = [sys.executable, "-m", "consumer", "multilang", str(props)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, float, float]] = []  # (time, daemon CPU, children CPU)
    child_cpu: dict[int, float] = {}
    deadline = time.monotonic() + 300
    try:
        while True:
            now = time.time()
            for c in _children(proc.pid):
                with contextlib.suppress(OSError):
                    child_cpu[c] = _cpu(c)
            samples.append((now, _cpu(proc.pid), sum(child_cpu.values())))
            done = _progress(progress)
            if sum(n for _, n in done) >= records:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{kind} trial ended early: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
                )
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    t0, n0 = done[0]
    t1 = done[-1][0]
    counted = records - n0

    def at(t: float) -> tuple[float, float, float]:  # the CPU sample nearest a time
        return min(samples, key=lambda s: abs(s[0] - t))

    return {
        "kind": kind,
        "records_per_s": counted / (t1 - t0),
        "daemon_cpu_s_per_100k": (at(t1)[1] - at(t0)[1]) / counted * 1e5,
        "child_cpu_s_per_100k": (at(t1)[2] - at(t0)[2]) / counted * 1e5 if kind == "multilang" else None,
        "seconds": t1 - t0,
        "records": counted,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the JSON result."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=12000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2, help="pairs of trials (native + multilang)")
    p.add_argument("--idle", type=float, default=0.2, help="seconds between GetRecords per shard (>= 0.2)")
    p.add_argument("--max-records", type=int, default=1000)
    args = p.parse_args(argv)
    if args.idle < 0.2:
        p.error("--idle below 0.2 s would read a shard more than 5 times a second (AWS throttles it)")
    from tools.emulators import Emulators
    from tools.kclpy import fetch_kclpy

    with tempfile.TemporaryDirectory(prefix="bench-multilang-") as tmp, Emulators() as emulators:
        work = Path(tmp)
        kclpy = fetch_kclpy(work)
        (work / "app.py").write_text(KCLPY_APP)
        kinesis, ddb = emulators.client("kinesis"), emulators.client("dynamodb")
        stream = f"ml-{uuid.uuid4().hex[:8]}"
        kinesis.create_stream(StreamName=stream, ShardCount=args.shards)
        while (
            kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamStatus"]
            != "ACTIVE"
        ):
            time.sleep(0.05)
        body = b'{"id": %d, "payload": "' + b"x" * 200 + b'"}'
        for start in range(0, args.records, 500):
            entries = [
                {"Data": body % i, "PartitionKey": f"k{i}"}
                for i in range(start, min(start + 500, args.records))
            ]
            assert kinesis.put_records(StreamName=stream, Records=entries).get("FailedRecordCount", 0) == 0
        env = {
            **os.environ,
            **emulators.endpoints.env(),
            "PYTHONPATH": os.pathsep.join([str(kclpy), str(REPO)]),
            "CONSUMER_IDLE_TIME_SECONDS": str(args.idle),
            "CONSUMER_MAX_RECORDS": str(args.max_records),
            "CONSUMER_INITIAL_POSITION": "TRIM_HORIZON",
        }
        order = [
            k
            for i in range(args.repeats)
            for k in (("native", "multilang") if i % 2 == 0 else ("multilang", "native"))
        ]
        trials = []
        for kind in order:
            trial = _trial(kind, stream, args.records, env, work, ddb)
            print(json.dumps(trial), file=sys.stderr, flush=True)
            trials.append(trial)
    summary: dict[str, Any] = {}
    for kind in ("native", "multilang"):
        mine = [t for t in trials if t["kind"] == kind]
        summary[kind] = {
            key: statistics.median(t[key] for t in mine)
            for key in ("records_per_s", "daemon_cpu_s_per_100k", "child_cpu_s_per_100k")
            if mine[0][key] is not None
        }
    summary["multilang_vs_native"] = {
        "records_per_s": summary["multilang"]["records_per_s"] / summary["native"]["records_per_s"],
        "daemon_cpu": summary["multilang"]["daemon_cpu_s_per_100k"]
        / summary["native"]["daemon_cpu_s_per_100k"],
    }
    result = {
        "settings": {
            "records": args.records,
            "shards": args.shards,
            "idle_time_between_reads_s": args.idle,
            "max_records": args.max_records,
            "repeats": args.repeats,
            "kclpy": "3.2.0 (v3 interface)",
        },
        "trials": trials,
        "median": summary,
    }
    out = REPO / "reports" / "bench" / "multilang.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
