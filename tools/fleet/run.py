"""One scenario of the fleet benchmark: a :class:`tools.fleet.runner.Fleet` driven by one of
:data:`tools.fleet.scenarios.SCENARIOS`, its deliveries analysed, its cost measured and its ownership timeline
drawn. ``python -m bench.fleet`` runs them all for the figures; tests/integration/test_fleet.py runs fast ones."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from tools.demo_report import plot_ownership
from tools.fleet.analysis import (
    PHASES,
    Milestones,
    analyze,
    handoff_moves,
    handoff_phases,
    ownership_runs,
    percentiles,
    producer_spacing,
)
from tools.fleet.runner import Fleet, FleetSettings
from tools.fleet.scenarios import SCENARIOS, Scenario, Timing, count_kind

__all__ = ["run_scenario"]

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
    """Per kind of hand-off: the gaps' percentiles, and each phase's (``tools.fleet.analysis.PHASES``)."""
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
    """Run scenario ``name`` of :data:`SCENARIOS` (or ``scenario``, with no setting overrides, its files
    named ``name``) on a fleet of its own; returns its figures."""
    fn, overrides = SCENARIOS[name] if scenario is None else (scenario, {})
    settings = replace(settings, **overrides)
    fleet = Fleet(endpoints, workdir / name, settings, name.split("_", maxsplit=1)[0])
    print(f"scenario {name}: {settings.shards} shards, lease {settings.lease_duration}s", flush=True)
    began = time.time()
    fleet.start_producer()
    try:
        extra = fn(fleet, timing)
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
    plot_ownership(
        ownership_runs(deliveries), fleet.events, began, f"{name}: shard ownership", workdir / f"{name}.png"
    )
    result["timeline_png"] = str(workdir / f"{name}.png")
    return result
