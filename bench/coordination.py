"""``python -m bench.coordination`` (``make bench-coordination``): the coordination cost benchmark.

(a) real worker processes against the emulators, every DynamoDB request billed by the fault proxy's meter
(``tools.coordination.metering``);
(b) the simulator at the same shape and settings, side by side (they must agree within ``TOLERANCE``);
(c) the simulator for every shape from 8/2 to 10,000/2,500, next to a model of KCL 3.x's cost (``kcl_cost``:
renewals, owner-GSI queries, worker metrics writes and the leader's scans; docs/benchmarks.md lists its
assumptions). Writes reports/bench/coordination.{json,md}."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import REPORTS, table_head, write_report
from consumer.config import LeaseConfig
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from tools.cli import COUNT, SECONDS, Parser, at_least
from tools.coordination.billing import Ledger, difference, dollars_per_month
from tools.coordination.metering import DynamoDBMeter
from tools.coordination.scenarios import ShapeRun, run_shape, summarize
from tools.coordination.sim import SimSettings
from tools.emulators import AwsEndpoints, Emulators
from tools.fleet.runner import Fleet, FleetSettings
from tools.tcp_proxy import FaultProxy, address

SHAPES = ((8, 2), (32, 8), (64, 16), (1000, 250), (4000, 1000), (10000, 2500))
TOLERANCE = 0.10  # the simulated steady coordination bill within 10% of the metered one
RATE = 10.0  # records a second the real run's producer writes
# The KCL 3.x model, calibrated against issue 11's $/month per shape (``calibration``).
ISSUE_FIGURES = {(8, 2): 4.13, (32, 8): 16.5, (64, 4): 32.1, (1000, 250): 520.0, (4000, 1000): 2060.0}
RENEWALS_PER_LEASE_HOUR = 1088.0  # one every ~3.3 s: a third of the 10 s failover time
LEASE_BYTES, METRICS_BYTES = 300, 500  # a lease item, a worker-metrics item
OWNER_QUERY_S, METRICS_WRITE_S, LEADER_SCAN_S = 10.0, 30.0, 10.0  # each worker's, each worker's, the leader's


def kcl_cost(shards: int, workers: int) -> dict[str, float]:
    """Units per hour by item, $ per month, and the steady units per second (KCL 3.x has no start model)."""
    renew_w = RENEWALS_PER_LEASE_HOUR * shards * math.ceil(LEASE_BYTES / 1024)
    metrics_w = 3600 / METRICS_WRITE_S * workers * math.ceil(METRICS_BYTES / 1024)
    query_r = 3600 / OWNER_QUERY_S * workers * 0.5
    scan_units = math.ceil(shards * LEASE_BYTES / 4096) + math.ceil(workers * METRICS_BYTES / 4096)
    scan_r = 3600 / LEADER_SCAN_S * scan_units
    read_h, write_h = query_r + scan_r, renew_w + metrics_w
    return {
        "lease_renewal_writes_per_hour": renew_w,
        "worker_metrics_writes_per_hour": metrics_w,
        "owner_query_reads_per_hour": query_r,
        "leader_scan_reads_per_hour": scan_r,
        "read_units_per_hour": read_h,
        "write_units_per_hour": write_h,
        "dollars_per_month": dollars_per_month(read_h, write_h),
        "steady_read_units_per_second": read_h / 3600,
        "steady_write_units_per_second": write_h / 3600,
    }


def calibration() -> dict[str, tuple[float, float]]:
    """Shape -> (the issue's figure, this model's)."""
    return {
        f"{s}/{w}": (v, round(kcl_cost(s, w)["dollars_per_month"], 2)) for (s, w), v in ISSUE_FIGURES.items()
    }


def _money(v: float) -> str:
    return f"{v:,.2f}" if v < 100 else f"{v:,.0f}"


def _peaks(shape: dict[str, Any], kind: str) -> str:
    """Start / steady / scale-out peak units per second of ``kind`` (read or write)."""
    sections = (shape.get("start"), shape.get("steady"), shape.get("scale_out"))
    return " / ".join(
        f"{s['peak'][f'lease_table_{kind}_units_per_s']:,.0f}" if s and "peak" in s else "-" for s in sections
    )


def markdown(results: dict[str, Any]) -> str:
    """One row per shape, next to the KCL 3.x model."""
    lines = table_head(
        "shards / workers | how | read units/h | write units/h | $/month (coordination) | checkpoints $/month "
        "| peak read u/s (start / steady / 2x scale-out) | peak write u/s (start / steady / 2x scale-out) "
        "| KCL 3.x $/month (model) | KCL 3.x steady read / write u/s"
    )
    for shape in results["shapes"]:
        s, w = shape["shards"], shape["workers"]
        st = shape.get("steady")
        how = f"{shape['status']} | - | - | - | - | - | -"
        if st:
            how = (
                f"simulated ({st['window_s']:.0f} s steady) | {st['coordination_read_units_per_hour']:,.0f} | "
                f"{st['coordination_write_units_per_hour']:,.0f} | {_money(st['coordination_dollars_per_month'])} | "
                f"{_money(st['checkpoint_dollars_per_month'])} | {_peaks(shape, 'read')} | {_peaks(shape, 'write')}"
            )
        kcl = kcl_cost(s, w)
        steady = f"{kcl['steady_read_units_per_second']:,.1f} / {kcl['steady_write_units_per_second']:,.1f}"
        lines.append(f"| {s:,} / {w:,} | {how} | {_money(kcl['dollars_per_month'])} | {steady} |")
    return "\n".join(lines) + "\n"


def _wait_fair(table: DynamoDBLeaseRepository, shards: int, workers: list[str]) -> float | None:
    """Seconds until every shard is owned and each of ``workers`` owns its fair share (None: not in 120 s)."""
    began = time.monotonic()
    low, high = shards // len(workers), -(-shards // len(workers))
    while time.monotonic() - began < 120:
        owners = Counter(lease.owner for lease in table.snapshot().leases)
        if sum(owners[w] for w in workers) == shards and all(low <= owners[w] <= high for w in workers):
            return round(time.monotonic() - began, 2)
        time.sleep(0.25)
    return None


def real_run(shards: int, workers: int, added: int, steady_seconds: float, workdir: Path) -> dict[str, Any]:
    """Start ``workers`` on ``shards``, meter ``steady_seconds`` of steady state, then add ``added`` more."""
    out: dict[str, Any] = {"shards": shards, "workers": workers, "added": added, "producer_rate": RATE}
    with Emulators() as emu:
        ledger = Ledger(time.monotonic)
        raw = emu.endpoints.client("dynamodb")  # straight to moto: not metered
        meter = DynamoDBMeter(ledger, raw)
        with FaultProxy(address(emu.endpoints.aws_endpoint), meter=meter) as proxy:
            endpoints = AwsEndpoints(emu.endpoints.kinesis_endpoint, proxy.url())
            fleet = Fleet(endpoints, workdir, FleetSettings(shards=shards, rate=RATE), "coordination")
            table = DynamoDBLeaseRepository(raw, fleet.lease_table, fleet.checkpoint_table)
            roles = {fleet.lease_table: "lease_table", fleet.checkpoint_table: "checkpoint_table"}
            t_start = time.monotonic()
            with fleet:
                ids = [f"w{i:03d}" for i in range(workers + added)]
                for wid in ids[:workers]:
                    fleet.start_worker(wid)
                fair = _wait_fair(table, shards, ids[:workers])
                out["start"] = {
                    "fair_share_after_s": fair,
                    "peak": ledger.peak(fleet.lease_table, t_start, time.monotonic() + 1),
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
                    "fair_share_after_s": _wait_fair(table, shards, ids),
                    "peak": ledger.peak(fleet.lease_table, t1, time.monotonic() + 1),
                }
            out["proxy_errors"] = meter.errors[:5]
    return out


def _compare(real: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    """Units per request of each lease-table operation must agree within ``TOLERANCE`` (the bill of a request);
    request rates can differ: real workers behind a loaded emulator make fewer requests than configured."""
    per_request: dict[str, Any] = {}
    for op, row in real["steady"]["by_operation"].items():
        other = sim["steady"]["by_operation"].get(op)
        if op.startswith("lease_table") and other is not None and row["requests_per_hour"]:
            a, b = (
                (x["read_units_per_hour"] + x["write_units_per_hour"]) / x["requests_per_hour"]
                for x in (row, other)
            )
            per_request[op] = {
                "real_units_per_request": round(a, 3),
                "sim_units_per_request": round(b, 3),
                "real_requests_per_hour": row["requests_per_hour"],
                "sim_requests_per_hour": other["requests_per_hour"],
                "agree": abs(a - b) <= TOLERANCE * max(a, b),
            }
    r, s = real["steady"]["coordination_dollars_per_month"], sim["steady"]["coordination_dollars_per_month"]
    return {
        "per_request": per_request,
        "real_dollars_per_month": r,
        "sim_dollars_per_month": s,
        "relative_difference": round(abs(s - r) / r, 3) if r else None,
        "tolerance": TOLERANCE,
        "agree": all(row["agree"] for row in per_request.values()),
    }


def _real(args: argparse.Namespace) -> dict[str, Any]:
    """(a) and (b): the real run and its simulation, compared."""
    s, w = args.real_shards, args.real_workers
    print(f"(a) real workers: {s}/{w} (+{args.real_added}), {args.real_steady:.0f} s steady", flush=True)
    real = real_run(s, w, args.real_added, args.real_steady, REPORTS / "coordination-real")
    print(f"(b) simulator at {s}/{w}", flush=True)
    settings = SimSettings(lease=LeaseConfig(discovery_interval=2.0))
    sim = run_shape(ShapeRun(s, w, steady_seconds=args.real_steady, added=0), settings)
    return {"real": real, "sim": sim, "comparison": _compare(real, sim)}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 1 when an invariant broke or real and simulated bills disagree."""
    p = Parser(
        "python -m bench.coordination", None, __doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--real-shards", type=COUNT, default=32)
    p.add_argument("--real-workers", type=COUNT, default=8)
    p.add_argument("--real-added", type=at_least(0), default=4, help="workers added for the real scale-out")
    p.add_argument("--real-steady", type=SECONDS, default=120.0, help="seconds of steady state metered")
    only = p.add_mutually_exclusive_group()
    only.add_argument("--skip-real", action="store_true", help="simulate only")
    only.add_argument("--real-only", action="store_true", help="the real run and its simulation, not (c)")
    p.add_argument("--wall-budget", type=SECONDS, default=240.0, help="wall seconds per simulated shape")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("consumer").setLevel(logging.ERROR)
    results: dict[str, Any] = {"kcl_model": {"calibration": calibration()}, "shapes": []}
    if not args.skip_real:
        results["real_vs_sim"] = _real(args)
        print(json.dumps(results["real_vs_sim"]["comparison"]), flush=True)
    if not args.real_only:  # (c): every shape (or said not to be, over --wall-budget), then the rebalance
        for s, w in SHAPES:
            window = 60.0 if s * w <= 4096 else 8.0  # a multiple of the 4 s heartbeat period
            run = ShapeRun(s, w, window, settle_seconds=max(8.0, window / 5), wall_budget=args.wall_budget)
            out = run_shape(run) | {"kcl_model": kcl_cost(s, w)}
            results["shapes"].append(out)
            dollars = out.get("steady", {}).get("coordination_dollars_per_month", "-")
            print(f"  {s}/{w}: {out['status']}: ${dollars}/month, {out['wall_seconds']} s wall", flush=True)
        run = ShapeRun(64, 8, steady_seconds=0, added=4, added_spread=0, after_added=15, wall_budget=600)
        results["rebalance_64_8_plus_4"] = run_shape(run)
        print(f"  64/8 then +4: {results['rebalance_64_8_plus_4'].get('scale_out')}", flush=True)
    write_report(REPORTS / "coordination.json", results, markdown(results))
    agree = results.get("real_vs_sim", {}).get("comparison", {}).get("agree", True)
    violations = sum(s.get("violation_count", 0) for s in results["shapes"])
    if violations or not agree:
        print(f"FAILED: {violations} invariant violations; bills agree: {agree}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
