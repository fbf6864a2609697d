"""Throttles of a fleet at rest (``make bench-at-rest``): workers at their defaults, caught up on a stream with a
trickle of traffic, behind a Kinesis limits proxy with AWS's quotas (the emulators' DynamoDB limits too). The
proxy counts the calls it refuses, the workers log the throttles they meet (``throttled``); the goal is zero of
both. JSON in ``reports/bench/at_rest.json``: calls refused per operation, per hour, and the run's size."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import REPORTS, write_report
from consumer.config import LeaseConfig
from tools.cli import COUNT, SECONDS, Parser
from tools.emulators import Emulators
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.fleet.runner import Fleet, FleetSettings
from tools.tcp_proxy import address

__all__ = ["main"]

OUT = REPORTS / "at_rest.json"
PROCESSOR = "consumer.examples.logging_processor:LoggingProcessor"


def _throttles_told(log: str) -> int:
    """The throttles a worker's JSON log tells: each ``throttled`` line is one, each ``throttles`` line counts
    those since the line before it (a fleet-wide throttle is told at a bounded rate)."""
    told = 0
    for line in log.splitlines():
        if '"event": "throttled"' in line:
            told += 1
        elif '"event": "throttles"' in line:
            told += int(json.loads(line)["throttles"])
    return told


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the emulators, the proxy and the workers; trickle records for ``--seconds``; count the refusals."""
    with Emulators() as emulators, tempfile.TemporaryDirectory() as tmp:
        proxy = KinesisLimitsProxy(address(emulators.endpoints.kinesis_endpoint), Limits())
        # The fleet runner's lease, scan, inbox and idle settings are the worker's defaults; metrics too here.
        settings = FleetSettings(shards=args.shards, rate=args.rate, metrics_interval=10.0)
        fleet = Fleet(emulators.endpoints, Path(tmp) / "fleet", settings, "at-rest")  # set-up: no proxy
        extra = {
            "AWS_ENDPOINT_URL_KINESIS": proxy.url(),
            "CONSUMER_PROCESSOR": PROCESSOR,
            "CONSUMER_LOG_LEVEL": "INFO",
        }
        extra["CONSUMER_DISCOVERY_INTERVAL_SECONDS"] = str(LeaseConfig().discovery_interval)  # the default
        started = time.monotonic()
        with proxy, fleet:
            for i in range(args.workers):
                fleet.start_worker(f"rest-{i}", extra)
            time.sleep(args.seconds)
        seconds = time.monotonic() - started
        refused = dict(proxy.limiter.refusals)
        worker_throttles = sum(_throttles_told(log.read_text()) for log in fleet.workdir.glob("*.log"))
    per_hour = {op: round(n * 3600 / seconds, 1) for op, n in refused.items()}
    return {
        "shards": args.shards,
        "workers": args.workers,
        "seconds": round(seconds, 1),
        "records_per_second": args.rate,
        "records_sent": len(fleet.produced),
        "kinesis_refused": refused,
        "kinesis_refused_per_hour": per_hour,
        "worker_throttled_events": worker_throttles,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, write and print the JSON report."""
    parser = Parser(prog="python -m bench.at_rest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=COUNT, default=8)
    parser.add_argument("--workers", type=COUNT, default=3)
    parser.add_argument("--seconds", type=SECONDS, default=300.0)
    parser.add_argument("--rate", type=COUNT, default=20, help="records per second on the stream")
    args = parser.parse_args(argv)
    report = run(args)
    write_report(OUT, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
