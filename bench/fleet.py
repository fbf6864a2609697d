"""The fleet benchmark: ``make bench`` (or ``python -m bench.fleet``).

Runs worker processes (``python -m consumer run``) against the local emulators with a producer writing
continuously, through the scenarios of docs/benchmarks.md, each in isolation (its own stream and tables), at
the consumer's default settings. Writes ``reports/bench/fleet.json`` (every figure), ``reports/bench/fleet.md``
(the tables of docs/benchmarks.md; ``python -m bench.fleet_report`` rebuilds them from the JSON) and one
ownership-timeline PNG per scenario. About 12 minutes on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.fleet_analysis import (
    PHASES,
    Milestones,
    analyze,
    handoff_moves,
    handoff_phases,
    ownership_runs,
    percentiles,
    producer_spacing,
)
from bench.fleet_report import markdown
from bench.fleet_runner import Fleet, FleetSettings
from bench.fleet_scenarios import DEFAULT_SCENARIOS, SCENARIOS, Scenario, Timing, count_kind
from bench.timeline import plot_timeline

__all__ = ["SCENARIOS", "Timing", "main", "run_scenario"]

LEASE_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")


def _cost(stats: dict[str, list[dict[str, Any]]], shards: int, since_uptime: float = 0.0) -> dict[str, Any]:
    """DynamoDB calls by type per worker-hour, and lease-table writes per shard-hour, from worker_stats."""
    per_type: dict[str, float] = {}
    hours = 0.0
    lease_writes = 0.0
    for entries in stats.values():
        base = next((e for e in entries if e["uptime_s"] >= since_uptime), None) if since_uptime else None
        last = entries[-1]
        span = last["uptime_s"] - (base["uptime_s"] if base else 0.0)
        if span <= 0:
            continue
        hours += span / 3600
        for role in ("lease_table", "checkpoint_table"):
            for op, n in last["calls"].get(role, {}).items():
                before = base["calls"].get(role, {}).get(op, 0) if base else 0
                per_type[f"{role}.{op}"] = per_type.get(f"{role}.{op}", 0) + n - before
                if role == "lease_table" and op in LEASE_WRITES:
                    lease_writes += n - before
    if hours == 0:
        return {}
    return {
        "dynamodb_calls_per_worker_hour": {k: round(v / hours) for k, v in sorted(per_type.items())},
        "lease_table_writes_per_shard_hour": round(lease_writes / (hours / len(stats)) / shards, 1),
        "measured_worker_hours": round(hours, 4),
    }


def _handoff_figures(
    deliveries: list[Any], kinds: dict[str, dict[str, Any]], milestones: Milestones
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per kind of hand-off: the gaps' percentiles, and each phase's (``bench.fleet_analysis.PHASES``)."""
    runs = ownership_runs(deliveries)
    moves, phases = handoff_moves(runs), handoff_phases(runs, milestones)
    gaps, parts = {}, {}
    for name, kind in kinds.items():
        chosen = count_kind(moves, kind)
        gaps[name] = percentiles([m.gap for m in chosen])
        timed = [phases[(m.shard, m.epoch)] for m in chosen if (m.shard, m.epoch) in phases]
        parts[name] = {p: percentiles([t[p] for t in timed]) for p in PHASES}
    return gaps, parts


def run_scenario(
    name: str,
    endpoints: Any,
    workdir: Path,
    settings: FleetSettings,
    timing: Timing,
    scenario: Scenario | None = None,
) -> dict[str, Any]:
    fn, overrides = SCENARIOS[name]
    settings = replace(settings, **overrides)
    fleet = Fleet(endpoints, workdir / name, settings, name.split("_", maxsplit=1)[0])
    print(f"scenario {name}: {settings.shards} shards, lease {settings.lease_duration}s", flush=True)
    began = time.time()
    fleet.start_producer()
    try:
        extra = (scenario or fn)(fleet, timing)
        fleet.stop_producer()
        drained = fleet.wait_drained()
    finally:
        fleet.stop_producer()
        fleet.stop_all()
    deliveries = fleet.deliveries()
    result = analyze(
        [(s, q) for s, q, _ in fleet.produced],
        deliveries,
        extra.pop("signals", None),
        extra.pop("owners", None),
    )
    kinds = extra.pop("handoff_kinds", None)
    if kinds:
        gaps, parts = _handoff_figures(deliveries, kinds, fleet.milestones())
        result["handoff_gap_by_kind_s"], result["handoff_phases_by_kind_s"] = gaps, parts
    result.update(extra)
    result["shards"], result["rate"] = settings.shards, settings.rate
    result["producer_record_interval_per_shard_s"] = producer_spacing(fleet.produced)
    put_times = [t for _, _, t in fleet.produced]
    span = max(put_times) - min(put_times) if put_times else 0.0
    result["producer_records_per_s"] = round(len(put_times) / span, 1) if span > 0 else None
    result["drained"] = drained
    since = timing.warmup if name == "steady_state" else 0.0
    result.update(_cost(fleet.worker_stats(), settings.shards, since))
    result["duration_s"] = round(time.time() - began, 1)
    plot_timeline(
        ownership_runs(deliveries), fleet.events, began, f"{name}: shard ownership", workdir / f"{name}.png"
    )
    result["timeline_png"] = str(workdir / f"{name}.png")
    return result


def _print_result(r: dict[str, Any]) -> None:
    gaps = r.get("handoff_gap_by_kind_s") or {"all moves": r["handoff_gap_s"]}
    figures = "; ".join(
        f"{kind} n={g['n']} p50/p95/p99/max {g['p50']}/{g['p95']}/{g['p99']}/{g['max']}"
        for kind, g in gaps.items()
    )
    print(
        f"  -> lost {r['lost']}, twice {r['delivered_more_than_once']}, overlaps {r['concurrent_owner_overlaps']}, "
        f"gap {figures}, takeover {r['signal_to_new_owner_first_record_s']}, {r['duration_s']}s",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS), help=f"any of {', '.join(SCENARIOS)}")
    p.add_argument("--out", default="reports/bench")
    p.add_argument("--lease-duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=100.0, help="records per second over all shards")
    p.add_argument("--warmup", type=float, default=12.0)
    p.add_argument("--settle", type=float, default=12.0)
    p.add_argument("--steady-window", type=float, default=60.0)
    p.add_argument(
        "--handoffs", type=int, default=100, help="planned hand-offs per kind in repeated scenarios"
    )
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.emulators import Emulators

    out = Path(args.out)
    settings = FleetSettings(lease_duration=args.lease_duration, rate=args.rate)
    timing = Timing(args.warmup, args.settle, args.steady_window, handoffs=args.handoffs)
    results: dict[str, Any] = {}
    began = time.time()
    with Emulators() as emu:
        for name in args.scenarios.split(","):
            results[name] = run_scenario(name, emu.endpoints, out / "fleet", settings, timing)
            _print_result(results[name])
        serialized = emu.moto_serialize
    summary = {
        "settings": asdict(settings),
        "timing": asdict(timing),
        "environment": {
            "moto_serialized_services": serialized,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
        },
        "wall_time_s": round(time.time() - began, 1),
        "scenarios": results,
        "max_lost": max(r["lost"] for r in results.values()),
        "planned_duplicates": sum(
            r["delivered_more_than_once"] for r in results.values() if r.get("planned")
        ),
        "concurrent_owner_overlaps": sum(r["concurrent_owner_overlaps"] for r in results.values()),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(summary, indent=2))
    (out / "fleet.md").write_text(markdown(summary))
    print(markdown(summary))
    print(f"wrote {out / 'fleet.json'} and {out / 'fleet.md'} in {summary['wall_time_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
