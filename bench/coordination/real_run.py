"""Real worker processes against the emulators, every DynamoDB request billed on its way through the fault
proxy (``tools.tcp_proxy``) by ``tools.coordination.metering``."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from tools.coordination.billing import Ledger, difference
from tools.coordination.metering import DynamoDBMeter
from tools.coordination.scenarios import peaks, summarize
from tools.emulators import AwsEndpoints, Emulators
from tools.fleet.runner import Fleet, FleetSettings
from tools.tcp_proxy import FaultProxy

__all__ = ["real_run"]


def _wait_fair(
    table: DynamoDBLeaseRepository, shards: int, workers: list[str], timeout: float
) -> float | None:
    """Seconds until every shard is owned and each of ``workers`` owns its fair share (None: not in time)."""
    began = time.monotonic()
    low, high = shards // len(workers), -(-shards // len(workers))
    while time.monotonic() - began < timeout:
        owners = Counter(lease.owner for lease in table.snapshot().leases)
        if sum(owners[w] for w in workers) == shards and all(low <= owners[w] <= high for w in workers):
            return round(time.monotonic() - began, 2)
        time.sleep(0.25)
    return None


def real_run(
    shards: int, workers: int, added: int, steady_seconds: float, workdir: Path, rate: float = 10.0
) -> dict[str, Any]:
    """Start ``workers`` on ``shards``, meter ``steady_seconds`` of steady state, then add ``added`` more."""
    out: dict[str, Any] = {"shards": shards, "workers": workers, "added": added, "producer_rate": rate}
    with Emulators() as emu:
        ledger = Ledger(time.monotonic)
        raw = emu.endpoints.client("dynamodb")  # straight to moto: not metered
        meter = DynamoDBMeter(ledger, raw)
        host, _, port = emu.endpoints.aws_endpoint.rsplit("/", 1)[-1].partition(":")
        with FaultProxy((host, int(port)), meter=meter) as proxy:
            endpoints = AwsEndpoints(
                kinesis_endpoint=emu.endpoints.kinesis_endpoint, aws_endpoint=proxy.url()
            )
            fleet = Fleet(endpoints, workdir, FleetSettings(shards=shards, rate=rate), "coordination")
            table = DynamoDBLeaseRepository(raw, fleet.lease_table, fleet.checkpoint_table)
            roles = {fleet.lease_table: "lease_table", fleet.checkpoint_table: "checkpoint_table"}
            t_start = time.monotonic()
            fleet.start_producer()
            try:
                ids = [f"w{i:03d}" for i in range(workers + added)]
                for wid in ids[:workers]:
                    fleet.start_worker(wid)
                fair = _wait_fair(table, shards, ids[:workers], 120)
                out["start"] = {
                    "fair_share_after_s": fair,
                    "peak": peaks(ledger, fleet.lease_table, t_start, time.monotonic() + 1),
                }
                time.sleep(12)  # settle: a heartbeat period and more
                t0, before = time.monotonic(), ledger.totals()
                time.sleep(steady_seconds)
                t1 = time.monotonic()
                steady = summarize(difference(ledger.totals(), before), t1 - t0, roles)
                out["steady"] = {"window_s": round(t1 - t0, 1), **steady}
                for wid in ids[workers:]:
                    fleet.start_worker(wid)
                out["scale_out"] = {
                    "workers_after": workers + added,
                    "fair_share_after_s": _wait_fair(table, shards, ids, 120),
                    "peak": peaks(ledger, fleet.lease_table, t1, time.monotonic() + 1),
                }
            finally:
                fleet.stop_producer()
                fleet.stop_all()
            out["proxy_errors"] = meter.errors[:5]
    return out
