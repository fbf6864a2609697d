"""Simulated scenarios per fleet shape: fleet start from an empty table, steady state, a 2x scale-out, and
64 shards / 8 workers then +4 (time to fair share, moves per moved shard)."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tools.coordination.billing import dollars_per_month
from tools.coordination.ledger import Totals, difference, peak_per_second
from tools.coordination.sim import CHECKPOINT_TABLE, LEASE_TABLE, FleetSim, SimSettings

__all__ = ["ShapeRun", "rebalance", "run_shape", "summarize"]

logger = logging.getLogger(__name__)

START_SPREAD = 2.0  # workers of a fleet (or of a scale-out) start spread over this many seconds


@dataclass(frozen=True)
class ShapeRun:
    shards: int
    workers: int
    steady_seconds: float = 60.0
    settle_seconds: float = 12.0  # after fair share, before the steady window (a heartbeat period and more)
    scale_out: bool = True
    wall_budget: float = 240.0  # give up (and say so) when the simulation takes longer than this


SIM_ROLES = {LEASE_TABLE: "lease_table", CHECKPOINT_TABLE: "checkpoint_table"}


def summarize(totals: Totals, seconds: float, roles: dict[str, str] | None = None) -> dict[str, Any]:
    """Units per hour by table role and operation; $ per month for coordination and for checkpoints."""
    names = roles or SIM_ROLES

    def _role(table: str) -> str:
        base = table.split(":", 1)[0]
        return names.get(base, base or "batch")

    hours = seconds / 3600
    by_op: dict[str, dict[str, float]] = {}
    coord_r = coord_w = cp_w = 0.0
    for (table, op), t in sorted(totals.items()):
        role = _role(table)
        row = by_op.setdefault(f"{role}.{op}" + (f"[{table.split(':', 1)[1]}]" if ":" in table else ""), {})
        row["requests_per_hour"] = row.get("requests_per_hour", 0) + t.requests / hours
        row["read_units_per_hour"] = row.get("read_units_per_hour", 0) + t.read_units / hours
        row["write_units_per_hour"] = row.get("write_units_per_hour", 0) + t.write_units / hours
        if role == "checkpoint_table" and op == "UpdateItem":  # the application's checkpoints
            cp_w += t.write_units / hours
        else:
            coord_r += t.read_units / hours
            coord_w += t.write_units / hours
    return {
        "by_operation": {k: {n: round(v, 1) for n, v in row.items()} for k, row in by_op.items()},
        "coordination_read_units_per_hour": round(coord_r, 1),
        "coordination_write_units_per_hour": round(coord_w, 1),
        "coordination_dollars_per_month": round(dollars_per_month(coord_r, coord_w), 2),
        "checkpoint_write_units_per_hour": round(cp_w, 1),
        "checkpoint_dollars_per_month": round(dollars_per_month(0, cp_w), 2),
    }


def _peaks(sim: FleetSim, start: float, end: float) -> dict[str, float]:
    r, w = peak_per_second(sim.ledger, LEASE_TABLE, start, end)
    return {"lease_table_read_units_per_s": r, "lease_table_write_units_per_s": w}


def _grow(sim: FleetSim, first: int, count: int, at: float) -> list[str]:
    ids = [f"w{i:05d}" for i in range(first, first + count)]
    for wid in ids:
        sim.add_worker(wid, at + sim.rng.uniform(0, START_SPREAD))
    return ids


def _until_fair(sim: FleetSim, ids: list[str], limit: float, wall_deadline: float) -> float | None:
    ok = sim.run_until(limit, stop=lambda: sim.fair(ids) or time.monotonic() > wall_deadline)
    return sim.clock.now if ok and sim.fair(ids) else None


def run_shape(run: ShapeRun, settings: SimSettings | None = None) -> dict[str, Any]:
    began = time.monotonic()
    deadline = began + run.wall_budget
    out: dict[str, Any] = {"shards": run.shards, "workers": run.workers}
    sim = FleetSim(run.shards, settings)
    ids = _grow(sim, 0, run.workers, 0.0)
    fair_at = _until_fair(sim, ids, 300.0, deadline)
    if fair_at is None:
        out["status"] = (
            f"not simulated: the fleet start did not finish within {run.wall_budget:.0f} s of wall time"
        )
        out["simulated_seconds"] = round(sim.clock.now, 1)
        out["wall_seconds"] = round(time.monotonic() - began, 1)
        return out
    out["start"] = {"fair_share_after_s": round(fair_at, 2), "peak": _peaks(sim, 0, fair_at + 2)}
    sim.run_until(fair_at + run.settle_seconds)
    t0, before = sim.clock.now, sim.ledger.totals()
    sim.run_until(t0 + run.steady_seconds)
    out["steady"] = {
        "window_s": run.steady_seconds,
        **summarize(difference(sim.ledger.totals(), before), run.steady_seconds),
        "peak": _peaks(sim, t0, t0 + run.steady_seconds),
    }
    if run.scale_out:
        t1 = sim.clock.now
        starts_before = len(sim.log.starts)
        all_ids = ids + _grow(sim, run.workers, run.workers, t1)
        fair2 = _until_fair(sim, all_ids, t1 + 300.0, deadline)
        if fair2 is None:
            out["scale_out"] = {"status": "did not reach fair share within the wall budget or 300 s"}
        else:
            sim.run_until(fair2 + 2)
            moves = Counter(key for _t, key, _w in sim.log.starts[starts_before:])
            out["scale_out"] = {
                "workers_after": 2 * run.workers,
                "fair_share_after_s": round(fair2 - t1, 2),
                "peak": _peaks(sim, t1, fair2 + 2),
                "moved_shards": len(moves),
                "max_moves_per_moved_shard": max(moves.values(), default=0),
            }
    out["violations"] = sim.log.violations[:10]
    out["violation_count"] = len(sim.log.violations)
    out["status"] = "simulated"
    out["simulated_seconds"] = round(sim.clock.now, 1)
    out["wall_seconds"] = round(time.monotonic() - began, 1)
    out["worker_steps"] = sim.steps
    return out


def rebalance(
    shards: int = 64, workers: int = 8, added: int = 4, settings: SimSettings | None = None
) -> dict[str, Any]:
    """``workers`` run to fair share; ``added`` start at once: how long until fair share, how often each
    moved shard moved."""
    sim = FleetSim(shards, settings)
    ids = _grow(sim, 0, workers, 0.0)
    fair_at = _until_fair(sim, ids, 300.0, time.monotonic() + 600)
    assert fair_at is not None, "the first workers never reached fair share"
    sim.run_until(fair_at + 12.0)
    t1 = sim.clock.now
    new = [f"w{i:05d}" for i in range(workers, workers + added)]
    for wid in new:
        sim.add_worker(wid, t1)
    starts_before = len(sim.log.starts)
    fair2 = _until_fair(sim, ids + new, t1 + 300.0, time.monotonic() + 600)
    sim.run_until(sim.clock.now + 15.0)  # any later churn counts as a move too
    moves = Counter(key for _t, key, _w in sim.log.starts[starts_before:])
    return {
        "shape": f"{shards}/{workers} then +{added}",
        "fair_share_after_s": None if fair2 is None else round(fair2 - t1, 2),
        "moved_shards": len(moves),
        "moves_per_moved_shard": dict(sorted(Counter(moves.values()).items())),
        "violation_count": len(sim.log.violations),
    }
