"""Throttles of a fleet at rest (``make bench-at-rest``): workers at their defaults, caught up on a stream
with a trickle of traffic, behind a Kinesis limits proxy with AWS's quotas (the emulators' own DynamoDB limits
too). The proxy counts every call it refuses, per operation; the workers count what they were refused
(``throttled`` log events). The goal is zero of both: pacing keeps a margin under every per-shard limit.

JSON in ``reports/bench/at_rest.json``: calls refused per operation, scaled to an hour, and the run's size.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from consumer.dynamo import create_tables

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]


def _trickle(kinesis: Any, stream: str, per_second: int, stop: threading.Event) -> int:
    sent = 0
    while not stop.wait(1.0):
        entries = [{"Data": b"tick", "PartitionKey": f"k-{sent + i}"} for i in range(per_second)]
        out = kinesis.put_records(StreamName=stream, Records=entries)
        sent += len(entries) - out.get("FailedRecordCount", 0)
    return sent


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tools.emulators import Emulators
    from tools.emulators.kinesis_proxy import KinesisLimitsProxy
    from tools.emulators.limits import Limits

    with Emulators() as emulators, tempfile.TemporaryDirectory() as tmp:
        endpoints = emulators.endpoints
        host, _, port = endpoints.kinesis_endpoint.removeprefix("http://").rpartition(":")
        proxy = KinesisLimitsProxy((host, int(port)), Limits()).start()
        kinesis, ddb = endpoints.client("kinesis"), endpoints.client("dynamodb")
        suffix = uuid.uuid4().hex[:6]
        stream, leases, cps = f"rest-{suffix}", f"rest-leases-{suffix}", f"rest-cps-{suffix}"
        kinesis.create_stream(StreamName=stream, ShardCount=args.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream)
        create_tables(ddb, leases, cps)
        env = {
            **os.environ,
            **endpoints.env(),
            "AWS_ENDPOINT_URL_KINESIS": proxy.url(),
            "CONSUMER_APPLICATION": "at-rest",
            "CONSUMER_STREAMS": stream,
            "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
            "CONSUMER_LEASE_TABLE": leases,
            "CONSUMER_CHECKPOINT_TABLE": cps,
            "CONSUMER_LOG_LEVEL": "INFO",
            "CONSUMER_METRICS_INTERVAL_SECONDS": "60",
        }
        logs = [Path(tmp) / f"worker-{i}.log" for i in range(args.workers)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "consumer", "run"],
                env={**env, "CONSUMER_WORKER_ID": f"rest-{i}"},
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=log.open("w"),
            )
            for i, log in enumerate(logs)
        ]
        stop = threading.Event()
        sent: list[int] = []
        producer = threading.Thread(target=lambda: sent.append(_trickle(kinesis, stream, args.rate, stop)))
        started = time.monotonic()
        try:
            producer.start()
            stop.wait(args.seconds)
        finally:
            stop.set()
            producer.join(30)
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
            proxy.stop()
        seconds = time.monotonic() - started
        refused = dict(proxy.limiter.refusals)
        worker_throttles = sum(log.read_text().count('"throttled"') for log in logs)
    per_hour = {op: round(n * 3600 / seconds, 1) for op, n in refused.items()}
    return {
        "shards": args.shards,
        "workers": args.workers,
        "seconds": round(seconds, 1),
        "records_per_second": args.rate,
        "records_sent": sent[0] if sent else 0,
        "kinesis_refused": refused,
        "kinesis_refused_per_hour": per_hour,
        "worker_throttled_events": worker_throttles,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--rate", type=int, default=20, help="records per second on the stream")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "at_rest.json")
    args = parser.parse_args(argv)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
