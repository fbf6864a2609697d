"""The fleet benchmark: ``make bench`` (or ``python -m bench.fleet``).

Runs worker processes against the local emulators with a producer writing continuously, through the
scenarios of docs/benchmarks.md, each in isolation, and writes ``reports/bench/fleet.json`` plus one
ownership-timeline PNG per scenario.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.fleet_analysis import analyze, ownership_runs
from bench.fleet_runner import Fleet, FleetSettings
from bench.timeline import plot_timeline
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.errors import CheckpointRejectedError
from consumer.records import Position

__all__ = ["SCENARIOS", "Timing", "main", "run_scenario"]

LEASE_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")


@dataclass(frozen=True)
class Timing:
    warmup: float = 12.0
    settle: float = 12.0
    steady_window: float = 60.0


Scenario = Callable[[Fleet, Timing], dict[str, Any]]


def _signal_and_watch(f: Fleet, worker: str, sig: signal.Signals) -> dict[str, Any]:
    owners = f.last_owners(time.time())
    t = f.signal(worker, sig)
    return {"signals": {worker: t}, "owners": {worker: owners.get(worker, [])}}


def scale_out(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("w2")
    time.sleep(t.warmup)
    f.start_worker("w3")
    f.start_worker("w4")
    time.sleep(t.settle)
    return {"planned": True}


def scale_in(f: Fleet, t: Timing) -> dict[str, Any]:
    for w in ("w1", "w2", "w3", "w4"):
        f.start_worker(w)
    time.sleep(t.warmup)
    owners = f.last_owners(time.time())
    signals = {w: f.signal(w, signal.SIGTERM) for w in ("w3", "w4")}
    codes = {w: f.wait_exit(w) for w in ("w3", "w4")}
    time.sleep(t.settle)
    return {
        "planned": True,
        "signals": signals,
        "owners": {w: owners.get(w, []) for w in signals},
        "exit_codes": codes,
    }


def rolling_restart(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("old1")
    f.start_worker("old2")
    time.sleep(t.warmup)
    signals: dict[str, float] = {}
    owners_at: dict[str, list[str]] = {}
    codes: dict[str, int] = {}
    for old, new in (("old1", "new1"), ("old2", "new2")):
        f.start_worker(new)
        f.wait_registered(new)
        time.sleep(2 * f.settings.scan_interval + 0.5)  # the old worker has seen the new one alive
        w = _signal_and_watch(f, old, signal.SIGTERM)
        signals.update(w["signals"])
        owners_at.update(w["owners"])
        codes[old] = f.wait_exit(old)
        time.sleep(3)
    time.sleep(t.settle)
    return {"planned": True, "signals": signals, "owners": owners_at, "exit_codes": codes}


def crash(f: Fleet, t: Timing) -> dict[str, Any]:
    for w in ("w1", "w2", "w3"):
        f.start_worker(w)
    time.sleep(t.warmup)
    watched = _signal_and_watch(f, "w3", signal.SIGKILL)
    f.wait_exit("w3")
    time.sleep(f.settings.lease_duration + t.settle)
    return {"planned": False, **watched}


def zombie(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("zombie")
    time.sleep(t.warmup)
    before = [d for d in f.deliveries() if d.worker == "zombie"]
    old_epochs = {d.shard: d.epoch for d in before}
    stopped = f.signal("zombie", signal.SIGSTOP)
    time.sleep(f.settings.lease_duration + 3)
    resumed = f.signal("zombie", signal.SIGCONT)
    time.sleep(t.settle)
    after = [d for d in f.deliveries() if d.worker == "zombie" and d.t >= stopped]
    stale = [d for d in after if old_epochs.get(d.shard) == d.epoch]
    rejected = None
    if old_epochs:
        shard, epoch = next(iter(old_epochs.items()))
        store = DynamoDBCheckpointStore(f.ddb, f.checkpoint_table)
        try:
            store.save(f.stream, shard, epoch, Position("9" * 50))
            rejected = False
        except CheckpointRejectedError as exc:
            rejected = exc.stale_epoch
    return {
        "planned": False,
        "zombie_shards_before_pause": len(old_epochs),
        "zombie_deliveries_under_old_epochs_after_pause": len(stale),
        "zombie_late_checkpoint_rejected": rejected,
        "paused_s": round(resumed - stopped, 3),
    }


def shard_split(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("w2")
    time.sleep(t.warmup)
    shards = f.kinesis.list_shards(StreamName=f.stream)["Shards"]
    parent = shards[0]["ShardId"]
    f.mark(f"split {parent}")
    f.kinesis.split_shard(
        StreamName=f.stream,
        ShardToSplit=parent,
        NewStartingHashKey=str(
            (
                int(shards[0]["HashKeyRange"]["StartingHashKey"])
                + int(shards[0]["HashKeyRange"]["EndingHashKey"])
            )
            // 2
        ),
    )
    f.wait_active()
    time.sleep(t.settle)
    kids = [
        s["ShardId"]
        for s in f.kinesis.list_shards(StreamName=f.stream)["Shards"]
        if s.get("ParentShardId") == parent
    ]
    ds = f.deliveries()
    parent_last = max((d.t for d in ds if d.shard == parent), default=0.0)
    kid_first = min((d.t for d in ds if d.shard in kids), default=float("inf"))
    return {"planned": False, "children": kids, "children_before_parent_end": int(kid_first < parent_last)}


def steady(f: Fleet, t: Timing) -> dict[str, Any]:
    f.start_worker("w1")
    f.start_worker("w2")
    time.sleep(t.warmup + t.steady_window)
    return {"planned": False, "steady_window_s": t.steady_window}


SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "scale_out_2_to_4": (scale_out, {}),
    "scale_in_4_to_2": (scale_in, {}),
    "rolling_restart": (rolling_restart, {}),
    "crash_sigkill": (crash, {}),
    "zombie_sigstop": (zombie, {}),
    "shard_split": (shard_split, {"shards": 4}),
    "steady_state": (steady, {}),
}


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
    result.update(extra)
    result["drained"] = drained
    since = timing.warmup if name == "steady_state" else 0.0
    result.update(_cost(fleet.worker_stats(), settings.shards, since))
    result["duration_s"] = round(time.time() - began, 1)
    plot_timeline(
        ownership_runs(deliveries), fleet.events, began, f"{name}: shard ownership", workdir / f"{name}.png"
    )
    result["timeline_png"] = str(workdir / f"{name}.png")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--out", default="reports/bench")
    p.add_argument("--lease-duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--warmup", type=float, default=12.0)
    p.add_argument("--settle", type=float, default=12.0)
    p.add_argument("--steady-window", type=float, default=60.0)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tools.emulators import Emulators

    out = Path(args.out)
    settings = FleetSettings(lease_duration=args.lease_duration, rate=args.rate)
    timing = Timing(args.warmup, args.settle, args.steady_window)
    results: dict[str, Any] = {}
    with Emulators() as emu:
        for name in args.scenarios.split(","):
            results[name] = run_scenario(name, emu.endpoints, out / "fleet", settings, timing)
            r = results[name]
            print(
                f"  -> lost {r['lost']}, twice {r['delivered_more_than_once']}, gap {r['handoff_gap_s']}, "
                f"takeover {r['signal_to_new_owner_first_record_s']}",
                flush=True,
            )
    summary = {
        "settings": asdict(settings),
        "timing": asdict(timing),
        "scenarios": results,
        "max_lost": max(r["lost"] for r in results.values()),
        "planned_duplicates": sum(
            r["delivered_more_than_once"] for r in results.values() if r.get("planned")
        ),
        "planned_gap_p99_s": max(
            (r["handoff_gap_s"]["p99"] or 0) for r in results.values() if r.get("planned")
        ),
        "planned_gap_p50_median_s": statistics.median(
            [
                r["handoff_gap_s"]["p50"]
                for r in results.values()
                if r.get("planned") and r["handoff_gap_s"]["p50"]
            ]
            or [0]
        ),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "scenarios"}, indent=2))
    print(f"wrote {out / 'fleet.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
