"""The fault benchmark (``make bench-faults``): every scenario of :mod:`tools.faults`, several times, on the
local emulators; writes reports/bench/faults.json and the markdown table of docs/benchmarks.md (faults.md)."""

from __future__ import annotations

import logging
import statistics
from dataclasses import asdict

from bench import REPORTS, table_head, write_report
from consumer.config import RetrievalConfig
from tools.cli import COUNT, Parser
from tools.emulators import Emulators
from tools.faults import LEASE, LIMIT_SCENARIOS, PUT_EVERY, SCENARIOS, FaultResult, run_scenario

__all__ = ["main"]


def _table(results: dict[str, list[FaultResult]]) -> str:
    lines = table_head(
        "fault (one worker) | runs | lost | delivered twice (total) | two owners at once | "
        "fault end → progress p50 / max (s)"
    )
    for name, runs in results.items():
        rec = [r.recovery_s for r in runs if r.recovery_s is not None]
        p50 = f"{statistics.median(rec):.2f}" if rec else "never"
        mx = f"{max(rec):.2f}" if len(rec) == len(runs) else "never"
        lines.append(
            f"| {name} | {len(runs)} | {sum(r.lost for r in runs)} | {sum(r.delivered_twice for r in runs)} | "
            f"{sum(not r.epochs_in_order for r in runs)} | {p50} / {mx} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = Parser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--runs", type=COUNT, default=3, help="runs per scenario (default 3)")
    args = parser.parse_args()
    logging.getLogger("consumer").setLevel(logging.ERROR)  # else each expected warning is a bare event name
    results: dict[str, list[FaultResult]] = {}
    with Emulators() as emulators:
        for s in (*SCENARIOS, *LIMIT_SCENARIOS):
            for i in range(args.runs):
                r = run_scenario(emulators.endpoints, s)
                print(f"{s.name} run {i + 1}: {r}", flush=True)
                results.setdefault(s.name, []).append(r)
    settings = {"lease": asdict(LEASE), "retrieval": asdict(RetrievalConfig()), "put_every_s": PUT_EVERY}
    data = {
        "settings": {**settings, "runs": args.runs},
        "results": {k: [asdict(r) for r in v] for k, v in results.items()},
    }
    write_report(REPORTS / "faults.json", data, _table(results))


if __name__ == "__main__":
    main()
