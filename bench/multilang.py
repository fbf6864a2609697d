"""The MultiLang benchmark (``make bench-multilang``): a KCL MultiLang app next to the native API.

Fresh applications in turn read one backlog on kinesis-local: ``python -m consumer run`` with ``Counter`` and
``python -m consumer multilang`` running ``KCLPY_APP`` (amazon-kclpy 3.2.0, v3), both counting and checkpointing
after each batch; records/s and the daemon's CPU per record (docs/benchmarks.md). JSON in reports/bench."""

from __future__ import annotations

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

from bench import REPORTS, write_report
from bench.datapath import worker_env
from bench.datapath_trial import local_backlog
from bench.pipeline import process_cpu
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from tools.cli import COUNT, Parser
from tools.emulators import Emulators
from tools.kclpy import KCLPY_VERSION, fetch_kclpy

__all__ = ["KCLPY_APP", "Counter", "main"]

REPO = Path(__file__).resolve().parents[1]
_SHARDS = 4
SETTINGS = {  # of both applications (CONSUMER_*; multilang ignores the processor)
    "idle_time_seconds": 0.2,  # between GetRecords per shard: AWS allows 5 a second
    "max_records": 1000,
    "checkpoint_interval_seconds": 0,  # native: a checkpoint per batch, as the kclpy app's checkpoint() calls
    "initial_position": "TRIM_HORIZON",
    "processor": "bench.multilang:Counter",
    "log_level": "WARNING",
}
_FIGURES = ("records_per_s", "daemon_cpu_s_per_100k", "child_cpu_s_per_100k")


class Counter(BaseProcessor):
    """Counts records (native API, auto checkpoints): a ``<time> <records>`` line per batch."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        """Count the batch."""
        with open(os.environ["BENCH_PROGRESS"], "a") as f:  # one short O_APPEND write
            f.write(f"{time.time():.6f} {len(data.records)}\n")


KCLPY_APP = '''#!/usr/bin/env python
"""An amazon-kclpy v3 processor that counts records and checkpoints every batch."""
import os
import time

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor


class App(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        pass

    def process_records(self, process_records_input):
        records = process_records_input.records
        for r in records:
            r.binary_data
        with open(os.environ["BENCH_PROGRESS"], "a") as f:
            f.write("%.6f %d\\n" % (time.time(), len(records)))
        process_records_input.checkpointer.checkpoint()

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(App()).run()
'''


def _children_cpu(pid: int, seen: dict[int, float]) -> float:
    """CPU seconds of ``pid``'s children so far: the live ones read now, those gone at their last reading."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread or a child that just ended
            for child in map(int, (task / "children").read_text().split()):
                seen[child] = process_cpu(child)
    return sum(seen.values())


def _progress(path: Path) -> list[tuple[float, int]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return [(float(t), int(n)) for t, n in map(str.split, lines)]


def _trial(kind: str, stream: str, records: int, env: dict[str, str], work: Path, ddb: Any) -> dict[str, Any]:
    app = f"ml-{kind}-{uuid.uuid4().hex[:6]}"
    progress = work / f"{app}.progress"
    env = {**env, **worker_env(ddb, stream, app, **SETTINGS), "BENCH_PROGRESS": str(progress)}
    command = ["run"]  # with CONSUMER_PROCESSOR; multilang takes the rest from the properties
    if kind == "multilang":
        props = work / f"{app}.properties"
        props.write_text(
            f"executableName = {sys.executable} app.py\nstreamName = {stream}\napplicationName = {app}\n"
            f"initialPositionInStream = TRIM_HORIZON\nregionName = {env['AWS_REGION']}\n"
        )
        command = ["multilang", str(props)]
    cmd = [sys.executable, "-m", "consumer", *command]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[tuple[float, float, float]] = []  # (time, daemon CPU, children's CPU)
    children: dict[int, float] = {}
    deadline = time.monotonic() + 300
    try:
        while True:
            samples.append((time.time(), process_cpu(proc.pid), _children_cpu(proc.pid, children)))
            done = _progress(progress)
            if sum(n for _, n in done) >= records:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                stderr = proc.stderr.read().decode()[-2000:] if proc.stderr else ""
                raise RuntimeError(f"{kind} trial ended early: {stderr}")
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    (t0, n0), t1 = done[0], done[-1][0]
    counted = records - n0
    first, last = (min(samples, key=lambda s: abs(s[0] - t)) for t in (t0, t1))  # the samples nearest
    return {
        "kind": kind,
        "records_per_s": counted / (t1 - t0),
        "daemon_cpu_s_per_100k": (last[1] - first[1]) / counted * 1e5,
        "child_cpu_s_per_100k": (last[2] - first[2]) / counted * 1e5 if kind == "multilang" else None,
        "seconds": t1 - t0,
        "records": counted,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints the JSON result."""
    p = Parser(prog="python -m bench.multilang", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=COUNT, default=40_000, help="backlog (user records) over 4 shards")
    p.add_argument("--repeats", type=COUNT, default=4, help="pairs of trials (native + multilang)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-multilang-") as tmp, Emulators() as emulators:
        work = Path(tmp)
        kclpy = fetch_kclpy(work)
        (work / "app.py").write_text(KCLPY_APP)
        stream = local_backlog(emulators.client("kinesis"), _SHARDS, args.records, size=240)
        env = {**os.environ, **emulators.endpoints.env(), "PYTHONPATH": f"{kclpy}{os.pathsep}{REPO}"}
        trials = []
        for i in range(args.repeats):
            for kind in ("native", "multilang") if i % 2 == 0 else ("multilang", "native"):
                trials.append(_trial(kind, stream, args.records, env, work, emulators.client("dynamodb")))
                print(json.dumps(trials[-1]), file=sys.stderr, flush=True)
    median: dict[str, Any] = {}
    for kind in ("native", "multilang"):
        mine = [t for t in trials if t["kind"] == kind]
        median[kind] = {k: statistics.median(t[k] for t in mine) for k in _FIGURES if mine[0][k] is not None}
    ml, native = median["multilang"], median["native"]
    ratios = {"records_per_s": "records_per_s", "daemon_cpu": "daemon_cpu_s_per_100k"}
    median["multilang_vs_native"] = {name: ml[k] / native[k] for name, k in ratios.items()}
    settings = {"records": args.records, "shards": _SHARDS, "repeats": args.repeats, **SETTINGS}
    result = {
        "settings": settings | {"kclpy": f"{KCLPY_VERSION} (v3 interface)"},
        "trials": trials,
        "median": median,
    }
    write_report(REPORTS / "multilang.json", result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
