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
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.fleet_report import markdown
from tools.fleet.run import run_scenario
from tools.fleet.runner import FleetSettings
from tools.fleet.scenarios import SCENARIOS, Timing

__all__ = ["main"]


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
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"any of {', '.join(SCENARIOS)}")
    p.add_argument("--out", default="reports/bench")
    p.add_argument("--lease-duration", type=float, default=10.0)
    p.add_argument("--rate", type=float, default=100.0, help="records per second over all shards")
    p.add_argument(
        "--warmup",
        type=float,
        default=12.0,
        help="seconds held once the fleet formed (each scenario waits for it)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=12.0,
        help="seconds held once a transition finished (waited for first)",
    )
    p.add_argument("--steady-window", type=float, default=60.0)
    p.add_argument(
        "--handoffs", type=int, default=100, help="planned hand-offs per kind in repeated scenarios"
    )
    args = p.parse_args(argv)
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
