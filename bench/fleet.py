"""The fleet benchmark (``make bench``, ``python -m bench.fleet``): the scenarios of docs/benchmarks.md, each
on its own stream and tables, at the consumer's defaults; writes ``reports/bench/fleet.json`` (every figure),
``fleet.md`` (the tables of docs/benchmarks.md) and one ownership-timeline PNG per scenario."""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict
from typing import Any

from bench import REPORTS, write_report
from bench.fleet_report import markdown
from tools.cli import COUNT, Parser, at_least
from tools.fleet.runner import FleetSettings
from tools.fleet.scenarios import SCENARIOS, Timing, run_scenario

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios, print and write their figures."""
    p = Parser(prog="python -m bench.fleet", description=__doc__)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"any of {', '.join(SCENARIOS)}")
    held = at_least(0, float)
    p.add_argument("--warmup", type=held, default=12.0, help="seconds held once the fleet formed")
    p.add_argument("--settle", type=held, default=12.0, help="seconds held once a transition finished")
    p.add_argument("--handoffs", type=COUNT, default=100, help="planned hand-offs wanted per kind")
    args = p.parse_args(argv)
    names = args.scenarios.split(",")
    if unknown := [n for n in names if n not in SCENARIOS]:
        p.error(f"--scenarios: unknown {', '.join(map(repr, unknown))}; any of {', '.join(SCENARIOS)}")
    from tools.emulators import Emulators

    settings, timing = FleetSettings(), Timing(warmup=args.warmup, settle=args.settle, handoffs=args.handoffs)
    results: dict[str, Any] = {}
    began = time.time()
    with Emulators() as emu:
        for name in names:
            r = results[name] = run_scenario(name, emu.endpoints, REPORTS / "fleet", settings, timing)
            gaps = r.get("handoff_gap_by_kind_s") or {"all moves": r["handoff_gap_s"]}
            print(
                f"  -> lost {r['lost']}, twice {r['delivered_more_than_once']}, overlaps "
                f"{r['concurrent_owner_overlaps']}, gaps {gaps}, takeover {r['signal_to_new_owner_first_record_s']}, "
                f"{r['duration_s']}s",
                flush=True,
            )
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
    }
    write_report(REPORTS / "fleet.json", summary, markdown(summary))
    print(f"wrote {REPORTS / 'fleet.json'} and {REPORTS / 'fleet.md'} in {summary['wall_time_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
