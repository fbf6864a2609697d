"""Throttles of a fleet at rest (``make bench-at-rest``): workers at their defaults, caught up on a stream with a
trickle of traffic, behind a Kinesis limits proxy with AWS's quotas (the emulators' DynamoDB limits too). The
proxy counts the calls it refuses, the workers log the throttles they meet (``throttled``); the goal is zero of
both. JSON in ``reports/bench/at_rest.json``: calls refused per operation, per hour, and the run's size.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.datapath import worker_env

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
PROCESSOR = "consumer.examples.logging_processor:LoggingProcessor"


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the emulators, the proxy and the workers; trickle records for ``--seconds``; count the refusals."""
    from tools.emulators import Emulators
    from tools.emulators.kinesis_proxy import KinesisLimitsProxy
    from tools.emulators.limits import Limits

    with Emulators() as emulators, tempfile.TemporaryDirectory() as tmp:
        endpoints = emulators.endpoints
        host, _, port = endpoints.kinesis_endpoint.removeprefix("http://").rpartition(":")
        proxy = KinesisLimitsProxy((host, int(port)), Limits()).start()
        kinesis, ddb = endpoints.client("kinesis"), endpoints.client("dynamodb")
        stream = f"rest-{uuid.uuid4().hex[:6]}"
        kinesis.create_stream(StreamName=stream, ShardCount=args.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=stream)
        env = {**os.environ, **endpoints.env(), "AWS_ENDPOINT_URL_KINESIS": proxy.url()}
        env.update(worker_env(ddb, stream, "at-rest", processor=PROCESSOR, log_level="INFO"))
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
        started, sent = time.monotonic(), 0
        try:
            for second in range(1, int(args.seconds) + 1):  # the trickle: ``--rate`` records a second
                time.sleep(max(0.0, started + second - time.monotonic()))
                entries = [{"Data": b"tick", "PartitionKey": f"k-{sent + i}"} for i in range(args.rate)]
                out = kinesis.put_records(StreamName=stream, Records=entries)
                sent += len(entries) - out.get("FailedRecordCount", 0)
        finally:
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
        "records_sent": sent,
        "kinesis_refused": refused,
        "kinesis_refused_per_hour": per_hour,
        "worker_throttled_events": worker_throttles,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, write and print the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--rate", type=int, default=20, help="records per second on the stream")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "at_rest.json")
    args = parser.parse_args(argv)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
