"""Real worker processes against the emulators, every DynamoDB request billed on its way
through the fault proxy (``tools.tcp_proxy``) by ``tools.coordination.metering``."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

from consumer.dynamo import from_item
from tools.coordination.ledger import Ledger, difference, peak_per_second
from tools.coordination.metering import DynamoDBMeter
from tools.coordination.scenarios import summarize
from tools.emulators import AwsEndpoints, Emulators
from tools.fleet.runner import Fleet, FleetSettings
from tools.tcp_proxy import FaultProxy

__all__ = ["real_run"]


def _port(url: str) -> tuple[str, int]:
    host, _, port = url.rsplit("/", 1)[-1].partition(":")
    return host, int(port)


def _owners(raw: Any, table: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        page = raw.scan(**kwargs)
        for item in page.get("Items", []):
            d = from_item(item)
            if d.get("item_type") == "lease":
                counts[d.get("owner") or ""] += 1
        if "LastEvaluatedKey" not in page:
            return counts
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _wait_fair(raw: Any, table: str, shards: int, workers: list[str], timeout: float) -> float | None:
    began = time.monotonic()
    low, high = shards // len(workers), -(-shards // len(workers))
    while time.monotonic() - began < timeout:
        owners = _owners(raw, table)
        if sum(owners[w] for w in workers) == shards and all(low <= owners[w] <= high for w in workers):
            return time.monotonic() - began
        time.sleep(0.25)
    return None


def real_run(
    shards: int, workers: int, added: int, steady_seconds: float, workdir: Path, rate: float = 10.0
) -> dict[str, Any]:
    out: dict[str, Any] = {"shards": shards, "workers": workers, "added": added, "producer_rate": rate}
    with Emulators() as emu:
        ledger = Ledger(time.monotonic)
        raw = emu.endpoints.client("dynamodb")
        meter = DynamoDBMeter(ledger, raw)
        with FaultProxy(_port(emu.endpoints.aws_endpoint), meter=meter) as proxy:
            endpoints = AwsEndpoints(
                kinesis_endpoint=emu.endpoints.kinesis_endpoint, aws_endpoint=proxy.url()
            )
            fleet = Fleet(endpoints, workdir, FleetSettings(shards=shards, rate=rate), "coordination")
            roles = {fleet.lease_table: "lease_table", fleet.checkpoint_table: "checkpoint_table"}
            t_start = time.monotonic()
            fleet.start_producer()
            try:
                ids = [f"w{i:03d}" for i in range(workers)]
                for wid in ids:
                    fleet.start_worker(wid)
                fair = _wait_fair(raw, fleet.lease_table, shards, ids, 120)
                out["start"] = {
                    "fair_share_after_s": None if fair is None else round(fair, 2),
                    "peak": dict(
                        zip(
                            ("lease_table_read_units_per_s", "lease_table_write_units_per_s"),
                            peak_per_second(ledger, fleet.lease_table, t_start, time.monotonic() + 1),
                            strict=True,
                        )
                    ),
                }
                time.sleep(12)  # settle: a heartbeat period and more
                t0, before = time.monotonic(), ledger.totals()
                time.sleep(steady_seconds)
                t1 = time.monotonic()
                out["steady"] = {
                    "window_s": round(t1 - t0, 1),
                    **summarize(difference(ledger.totals(), before), t1 - t0, roles),
                }
                new = [f"w{i:03d}" for i in range(workers, workers + added)]
                for wid in new:
                    fleet.start_worker(wid)
                fair2 = _wait_fair(raw, fleet.lease_table, shards, ids + new, 120)
                out["scale_out"] = {
                    "workers_after": workers + added,
                    "fair_share_after_s": None if fair2 is None else round(fair2, 2),
                    "peak": dict(
                        zip(
                            ("lease_table_read_units_per_s", "lease_table_write_units_per_s"),
                            peak_per_second(ledger, fleet.lease_table, t1, time.monotonic() + 1),
                            strict=True,
                        )
                    ),
                }
            finally:
                fleet.stop_producer()
                fleet.stop_all()
            out["proxy_errors"] = meter.errors[:5]
    return out
