"""Simulated scenarios per fleet shape: fleet start from an empty table, steady state, then workers added
(a 2x scale-out, or 64 shards / 8 workers then +4): time to fair share, peaks, moves per moved shard."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from tools.coordination.billing import Totals, difference, dollars_per_month
from tools.coordination.sim import CHECKPOINT_TABLE, LEASE_TABLE, FleetSim, SimSettings

__all__ = ["ShapeRun", "run_shape", "summarize"]

START_SPREAD = 2.0  # workers of a fleet (or of a scale-out) start spread over this many seconds
SIM_ROLES = {LEASE_TABLE: "lease_table", CHECKPOINT_TABLE: "checkpoint_table"}


@dataclass(frozen=True)
class ShapeRun:
    """One shape's run: its steady window (0: none), then ``added`` workers (None: as many again)."""

    shards: int
    workers: int
    steady_seconds: float = 60.0
    settle_seconds: float = 12.0  # after fair share, before the steady window (a heartbeat period and more)
    added: int | None = None
    added_spread: float = START_SPREAD
    after_added: float = 2.0  # run on after their fair share, moves counted over it too
    wall_budget: float = 240.0  # give up (and say so) when the simulation takes longer than this


def summarize(totals: Totals, seconds: float, roles: dict[str, str] = SIM_ROLES) -> dict[str, Any]:
    """Units per hour by table role and operation; $ per month for coordination and for checkpoints."""
    hours = seconds / 3600
    by_op: dict[str, dict[str, float]] = {}
    coord_r = coord_w = cp_w = 0.0
    for (table, op), t in sorted(totals.items()):
        role = roles.get(table, table)
        rates = {"requests": t.requests, "read_units": t.read_units, "write_units": t.write_units}
        by_op[f"{role}.{op}"] = {f"{name}_per_hour": round(v / hours, 1) for name, v in rates.items()}
        if role == "checkpoint_table" and op == "UpdateItem":  # the application's checkpoints
            cp_w += t.write_units / hours
        else:
            coord_r += t.read_units / hours
            coord_w += t.write_units / hours
    return {
        "by_operation": by_op,
        "coordination_read_units_per_hour": round(coord_r, 1),
        "coordination_write_units_per_hour": round(coord_w, 1),
        "coordination_dollars_per_month": round(dollars_per_month(coord_r, coord_w), 2),
        "checkpoint_write_units_per_hour": round(cp_w, 1),
        "checkpoint_dollars_per_month": round(dollars_per_month(0, cp_w), 2),
    }


def _join(
    sim: FleetSim, ids: list[str], count: int, spread: float, wall_deadline: float
) -> tuple[float | None, int]:
    """Start ``count`` more workers over ``spread`` seconds; (when all held their fair share, if within 300 s
    and the wall deadline; how many shard starts came before)."""
    t1, starts = sim.clock.now, len(sim.log.starts)
    for i in range(len(ids), len(ids) + count):
        ids.append(f"w{i:05d}")
        sim.add_worker(ids[-1], t1 + sim.rng.uniform(0, spread))
    ok = sim.run_until(t1 + 300.0, stop=lambda: sim.fair(ids) or time.monotonic() > wall_deadline)
    return (sim.clock.now if ok and sim.fair(ids) else None), starts


def run_shape(run: ShapeRun, settings: SimSettings | None = None) -> dict[str, Any]:
    """Fleet start, steady state and (``run.scale_out``) doubling the fleet, on one simulated fleet."""
    began = time.monotonic()
    deadline = began + run.wall_budget
    out: dict[str, Any] = {"shards": run.shards, "workers": run.workers}
    sim = FleetSim(run.shards, settings)
    ids: list[str] = []
    fair_at, _ = _join(sim, ids, run.workers, START_SPREAD, deadline)
    if fair_at is None:
        out["status"] = (
            f"not simulated: the fleet start did not finish within {run.wall_budget:.0f} s of wall time"
        )
        return out | _ran(sim, began)
    out["start"] = {
        "fair_share_after_s": round(fair_at, 2),
        "peak": sim.ledger.peak(LEASE_TABLE, 0, fair_at + 2),
    }
    sim.run_until(fair_at + run.settle_seconds)
    t0, before = sim.clock.now, sim.ledger.totals()
    t1 = t0 + run.steady_seconds
    sim.run_until(t1)
    if run.steady_seconds:
        steady = summarize(difference(sim.ledger.totals(), before), run.steady_seconds)
        out["steady"] = {
            "window_s": run.steady_seconds,
            **steady,
            "peak": sim.ledger.peak(LEASE_TABLE, t0, t1),
        }
    if added := run.workers if run.added is None else run.added:
        fair2, starts = _join(sim, ids, added, run.added_spread, deadline)
        out["scale_out"] = {"status": "did not reach fair share within the wall budget or 300 s"}
        if fair2 is not None:
            sim.run_until(fair2 + run.after_added)  # any later churn counts as a move too
            moves = Counter(key for _t, key, _w in sim.log.starts[starts:])
            out["scale_out"] = {
                "workers_after": len(ids),
                "fair_share_after_s": round(fair2 - t1, 2),
                "peak": sim.ledger.peak(LEASE_TABLE, t1, fair2 + 2),
                "moved_shards": len(moves),
                "max_moves_per_moved_shard": max(moves.values(), default=0),
                "moves_per_moved_shard": dict(sorted(Counter(moves.values()).items())),
            }
    out |= {"violations": sim.log.violations[:10], "violation_count": len(sim.log.violations)}
    return out | {"status": "simulated", **_ran(sim, began), "worker_steps": sim.steps}


def _ran(sim: FleetSim, began: float) -> dict[str, float]:
    return {"simulated_seconds": round(sim.clock.now, 1), "wall_seconds": round(time.monotonic() - began, 1)}
