"""The catch-up benchmark (``make bench-drain``): how fast a worker at its defaults drains a backlog, next to
the fastest loop AWS's limits allow, on kinesis-local behind the emulators' limits layer (on: AWS's
per-shard read limits answer every GetRecords).

The fastest legal loop is plain boto3, one thread per shard: GetRecords with ``Limit`` 10,000, each call
started 0.2 s after the previous one started (5 a second) or, after a big read, once the bytes it returned
have refilled at 2 MiB/s from when they came (the limits exactly, no margin; the limits layer, like a service
that is slow to answer, counts a read's bytes when it answers); a throttled call is tried again 0.2 s later. The worker is
``python -m consumer run`` with no retrieval setting at all. Both read the same pre-loaded stream from
TRIM_HORIZON, one after the other (loop, worker, worker, loop, ...), each in a process of its own, and both
are timed the same way: from the moment the first shard is opened to the last record. Small (100-byte) and
1 KB records, 4 shards. Medians over the repeats; JSON in ``reports/bench/drain.json``.

Only the writes that pre-load the stream run with the PutRecords limits off (so that setting up does not take
minutes); every read is limited as on AWS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.datapath import _run_cli_worker
from bench.datapath_processor import WINDOW

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
AWS_CALL_INTERVAL = 0.2  # 5 GetRecords per second per shard
AWS_READ_BYTES = 2 * 1024 * 1024  # per second per shard
AWS_LIMIT = 10_000


def _payload(i: int, size: int) -> bytes:
    body = json.dumps({"id": i, "kind": "order"}).encode()
    return body + b" " * (size - len(body))


def _fill(kinesis: Any, stream: str, shards: int, per_shard: int, size: int) -> None:
    """``per_shard`` records of ``size`` bytes on every shard (explicit hash keys spread them evenly)."""
    ranges = [s["HashKeyRange"]["StartingHashKey"] for s in kinesis.list_shards(StreamName=stream)["Shards"]]
    per_call = max(1, min(500, (4 * 1024 * 1024) // (size + 64)))
    entries = [
        {"Data": _payload(i, size), "PartitionKey": f"pk-{i}", "ExplicitHashKey": ranges[i % shards]}
        for i in range(per_shard * shards)
    ]
    for i in range(0, len(entries), per_call):
        chunk = entries[i : i + per_call]
        while chunk:
            out = kinesis.put_records(StreamName=stream, Records=chunk)
            chunk = [e for e, r in zip(chunk, out["Records"], strict=True) if "ErrorCode" in r]


def fastest_legal_loop(spec: dict[str, Any]) -> dict[str, Any]:
    """The loop described in the module's docstring; returns the window and the throttles it met."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client("kinesis", config=Config(retries={"total_max_attempts": 1}))
    shards = [s["ShardId"] for s in client.list_shards(StreamName=spec["stream"])["Shards"]]
    throttles = [0]

    def run(shard: str) -> None:
        WINDOW.begin()
        iterator = client.get_shard_iterator(
            StreamName=spec["stream"], ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        next_call = 0.0
        while iterator and not WINDOW.done.is_set():
            if (wait := next_call - time.monotonic()) > 0:
                time.sleep(wait)
            started = time.monotonic()
            try:
                out = client.get_records(ShardIterator=iterator, Limit=AWS_LIMIT)
            except client.exceptions.ProvisionedThroughputExceededException:
                throttles[0] += 1
                next_call = started + AWS_CALL_INTERVAL
                continue
            size = sum(len(r["Data"]) + len(r["PartitionKey"]) for r in out["Records"])
            next_call = max(started + AWS_CALL_INTERVAL, time.monotonic() + size / AWS_READ_BYTES)
            WINDOW.add(len(out["Records"]))
            iterator = out.get("NextShardIterator")
            if out.get("MillisBehindLatest") == 0 and not out["Records"]:
                return

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in shards]
    for t in threads:
        t.start()
    WINDOW.done.wait(spec["timeout"])
    return {**WINDOW.result, "throttles": throttles[0]}


def _trial_loop(stream: str, total: int, env: dict[str, str], timeout: float) -> dict[str, Any]:
    spec = {"stream": stream, "timeout": timeout}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.drain", "--trial", json.dumps(spec)],
        env={**env, "DATAPATH_TARGET": str(total)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"loop trial failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _trial_worker(
    ddb: Any, stream: str, total: int, env: dict[str, str], timeout: float, tmp: Path
) -> dict[str, Any]:
    suffix = uuid.uuid4().hex[:8]
    result = tmp / f"worker-{suffix}.json"
    worker_env = {
        **env,
        "CONSUMER_APPLICATION": f"drain-{suffix}",
        "CONSUMER_STREAMS": stream,
        "CONSUMER_PROCESSOR": "bench.datapath_processor:CountingProcessor",
        "CONSUMER_LEASE_TABLE": f"drain-leases-{suffix}",
        "CONSUMER_CHECKPOINT_TABLE": f"drain-cps-{suffix}",
        "CONSUMER_WORKER_ID": f"drain-{suffix}",
        "CONSUMER_METRICS_INTERVAL_SECONDS": "60",
        "CONSUMER_LOG_LEVEL": "WARNING",
        "DATAPATH_TARGET": str(total),
        "DATAPATH_RESULT": str(result),
    }
    return _run_cli_worker(ddb, worker_env, result, timeout, cwd=REPO)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tools.emulators import Emulators

    emulators = Emulators(limits={"put_records_per_shard": None, "put_bytes_per_shard": None})
    results: list[dict[str, Any]] = []
    with emulators, tempfile.TemporaryDirectory() as tmp:
        endpoints = emulators.endpoints
        kinesis, ddb = endpoints.client("kinesis"), endpoints.client("dynamodb")
        env = {**os.environ, **endpoints.env()}
        for size, per_shard in ((100, args.small_records), (1024, args.kb_records)):
            stream = f"drain-{size}-{uuid.uuid4().hex[:6]}"
            kinesis.create_stream(StreamName=stream, ShardCount=args.shards)
            kinesis.get_waiter("stream_exists").wait(StreamName=stream)
            _fill(kinesis, stream, args.shards, per_shard, size)
            total = per_shard * args.shards
            rows: dict[str, list[dict[str, Any]]] = {"loop": [], "worker": []}
            order = ["loop", "worker", "worker", "loop"] * args.repeats
            for kind in order[: 2 * args.repeats]:
                if kind == "loop":
                    rows[kind].append(_trial_loop(stream, total, env, args.timeout))
                else:
                    rows[kind].append(_trial_worker(ddb, stream, total, env, args.timeout, Path(tmp)))
                row = rows[kind][-1]
                print(f"{size:>5} B {kind:<6} {row['records_per_s']:>9.0f} records/s", flush=True)
            loop = statistics.median(r["records_per_s"] for r in rows["loop"])
            worker = statistics.median(r["records_per_s"] for r in rows["worker"])
            results.append(
                {
                    "record_bytes": size,
                    "shards": args.shards,
                    "records": total,
                    "samples": args.repeats,
                    "loop_records_per_s": round(loop),
                    "worker_records_per_s": round(worker),
                    "worker_vs_loop": round(worker / loop, 3),
                    "loop_throttles": [r.get("throttles", 0) for r in rows["loop"]],
                    "loop_mb_per_s_per_shard": round(loop * (size + 8) / args.shards / 1e6, 3),
                    "trials": rows,
                }
            )
    return {"limits": "on (reads as on AWS; pre-load writes unlimited)", "scenarios": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--small-records", type=int, default=40_000, help="100-byte records per shard")
    parser.add_argument("--kb-records", type=int, default=12_000, help="1 KB records per shard")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "drain.json")
    parser.add_argument("--trial", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trial:
        print(json.dumps(fastest_legal_loop(json.loads(args.trial))), flush=True)
        return 0
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for s in report["scenarios"]:
        print(
            f"{s['record_bytes']:>5} B x {s['shards']} shards: worker {s['worker_records_per_s']}/s, "
            f"fastest legal loop {s['loop_records_per_s']}/s: {s['worker_vs_loop']}x ({s['samples']} samples each)"
        )
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
