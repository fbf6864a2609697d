"""The fleet benchmark's markdown tables (``reports/bench/fleet.md``, for docs/benchmarks.md) from its JSON:
``python -m bench.fleet_report [reports/bench/fleet.json]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import REPORTS, table_head
from tools.cli import Parser
from tools.fleet.analysis import PHASES

__all__ = ["markdown"]

_PLANNED_ROWS = (
    ("scale_cycles", "scale_out", "scale-out 2 → 4"),
    ("scale_cycles", "scale_in", "scale-in 4 → 2 (SIGTERM)"),
    ("rolling_restart_cycles", "rolling_restart", "rolling restart (start new, SIGTERM oldest)"),
)
_OTHER_ROWS = (
    ("crash_sigkill", "crash (SIGKILL 1 of 3)"),
    ("crash_leader_sigkill", "crash of the leader (SIGKILL)"),
    ("zombie_sigstop", "zombie (SIGSTOP > lease, SIGCONT)"),
    ("shard_split", "shard split under load (4 shards)"),
    ("steady_state", "steady state (2 workers)"),
)


def _s(stats: dict[str, Any], *keys: str) -> str:
    """``stats``' seconds at ``keys``, joined by " / " ("—" where there are none)."""
    return " / ".join("—" if stats.get(k) is None else f"{stats[k]:.2f}" for k in keys)


def _counts(r: dict[str, Any]) -> str:
    return f"{r['produced']:,} | {r['lost']} | {r['delivered_more_than_once']} | {r['concurrent_owner_overlaps']}"


def _planned(scenarios: dict[str, Any]) -> list[str]:
    lines = table_head(
        "transition | runs | hand-offs | gap p50 / p95 / p99 / max (s) | zero-cost floor p50 / p99 (s) | "
        "SIGTERM → new owner's first record p50 / max (s) | producer: records/s, per-shard interval mean / "
        "p95 (s) | produced | lost | delivered twice | concurrent owners"
    )
    for scenario, kind, label in _PLANNED_ROWS:
        if r := scenarios.get(scenario):
            g = r.get("handoff_gap_by_kind_s", {}).get(kind, {})
            takeover = r["signal_to_new_owner_first_record_s"] if kind != "scale_out" else {}
            lines.append(
                f"| {label} | {r.get('cycles', 1)} | {g.get('n', 0)} | {_s(g, 'p50', 'p95', 'p99', 'max')} | "
                f"{_s(r.get('zero_cost_gap_s', {}), 'p50', 'p99')} | {_s(takeover, 'p50', 'max')} | "
                f"{r.get('producer_records_per_s', '—')}, "
                f"{_s(r.get('producer_record_interval_per_shard_s', {}), 'mean', 'p95')} | {_counts(r)} |"
            )
    return lines


def _phases(scenarios: dict[str, Any]) -> list[str]:
    """Where each kind's gap goes: every phase's p50 / p99 (they do not add up at the p99)."""
    lines = table_head("transition | hand-offs timed | " + " | ".join(f"{p} p50 / p99 (s)" for p in PHASES))
    for scenario, kind, label in _PLANNED_ROWS:
        if parts := (scenarios.get(scenario) or {}).get("handoff_phases_by_kind_s", {}).get(kind):
            cells = " | ".join(_s(parts[p], "p50", "p99") for p in PHASES)
            lines.append(f"| {label} | {parts[PHASES[0]].get('n', 0)} | {cells} |")
    return [*lines, ""] if len(lines) > 2 else []


def _others(scenarios: dict[str, Any]) -> list[str]:
    lines = table_head(
        "scenario | produced | lost | delivered twice | concurrent owners | moved shards | "
        "gap p50 / p99 / max (s) | signal → new owner's first record p50 / max (s)"
    )
    for scenario, label in _OTHER_ROWS:
        if r := scenarios.get(scenario):
            lines.append(
                f"| {label} | {_counts(r)} | {r['moved_shards']} | {_s(r['handoff_gap_s'], 'p50', 'p99', 'max')} | "
                f"{_s(r['signal_to_new_owner_first_record_s'], 'p50', 'max')} |"
            )
    return lines


def _settings_line(summary: dict[str, Any]) -> str:
    s, env = summary["settings"], summary.get("environment", {})
    planned = [r for r in summary["scenarios"].values() if r.get("planned") and "shards" in r]
    default = f"{s['shards']} shards, producer target {s['rate']:g} records/s"
    targets = sorted({f"{r['shards']} shards, producer target {r['rate']:g} records/s" for r in planned})
    return (
        f"Settings: {', '.join(targets) or default} for the planned transitions (other scenarios: {default}); "
        f"lease duration {s['lease_duration']:g} s, idle time between reads {s['idle_time']:g} s "
        f"(`CONSUMER_IDLE_TIME_SECONDS`), scan interval {s['scan_interval']:g} s, inbox poll "
        f"{s['inbox_poll_interval']:g} s; moto serializing `{env.get('moto_serialized_services', '?')}`; "
        f"{env.get('cpus', '?')} CPUs, {env.get('date', '?')}, wall time {summary.get('wall_time_s', 0) / 60:.1f} "
        "min. The producer and the zero-cost floor: docs/benchmarks.md."
    )


def markdown(summary: dict[str, Any]) -> str:
    """The settings line and the tables of docs/benchmarks.md, with the zombie's and steady state's figures."""
    scenarios = summary["scenarios"]
    parts = [_settings_line(summary), "", *_planned(scenarios), "", *_phases(scenarios), *_others(scenarios)]
    if zombie := scenarios.get("zombie_sigstop"):
        parts += [
            "",
            f"Zombie: {zombie['zombie_deliveries_under_old_epochs_after_pause']} deliveries under its old epochs "
            f"after SIGCONT; late checkpoint rejected: {zombie['zombie_late_checkpoint_rejected']}.",
        ]
    if "lease_table_writes_per_shard_hour" in (steady := scenarios.get("steady_state") or {}):
        writes = steady["lease_table_writes_per_shard_hour"]
        parts += ["", f"Lease-table writes per shard-hour (steady state): {writes}."]
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the tables of a fleet benchmark's JSON."""
    p = Parser(prog="python -m bench.fleet_report", description=__doc__)
    p.add_argument("json", nargs="?", type=Path, default=REPORTS / "fleet.json")
    path = p.parse_args(argv).json
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        p.error(f"cannot read {path}: {exc}")
    print(markdown(summary), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
