"""CPU per record, the worker next to the bare boto3 loop, small plain records and KPL aggregates side by side:
the summary ``bench.datapath`` adds to its JSON (``cpu_per_record``) and markdown.

Each figure is the median over the trials of one scenario (each trial a process of its own, interleaved with
the other loop's), in µs of CPU (all threads of the process) per user record, measured from the trial's first
record to its last. The read rate each loop reached is reported next to it, since fixed costs per second
(leases, heartbeats, metrics) weigh less per record at a higher rate: the ratio is only the one the issue asks
for when the two rates match. ``lean`` is the worker's data path alone (its client with the lean GetRecords
parser, ``BotoKinesis``, ``to_records``) in the bare loop's place: same threads, same pacing, same calls.
"""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["TARGET", "cpu_per_record", "cpu_table"]

TARGET = 0.3  # the worker's CPU per record, at most this times the bare loop's (issue 23)


def _us(rows: list[dict[str, Any]]) -> list[float]:
    return [round(r["cpu_s_per_100k"] * 10, 3) for r in rows]  # CPU-s per 100k records -> µs per record


def cpu_per_record(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per kinesis-local scenario of four shards (plain, KPL): the worker's and the bare loop's CPU
    per record (median and every trial), their ratio, the records/s each reached, and the sample counts."""
    out = []
    for r in results:
        settings = r["settings"]
        if settings["backend"] != "local" or settings["shards"] != 4:
            continue
        trials = r["trials"]
        entry: dict[str, Any] = {
            "scenario": r["scenario"],
            "records": "KPL-aggregated" if settings["kpl"] else "plain",
            "user_records_per_trial": settings["records"],
            "per_aggregate": settings["per_aggregate"] if settings["kpl"] else None,
        }
        for kind, rows in trials.items():
            us = _us(rows)
            entry[kind] = {
                "us_per_record": statistics.median(us),
                "us_per_record_trials": us,
                "records_per_s": statistics.median(row["records_per_s"] for row in rows),
                "samples": len(rows),
            }
            if rows and all("idle_cpu_ms_per_s" in row for row in rows):
                entry[kind]["idle_cpu_ms_per_s"] = round(
                    statistics.median(row["idle_cpu_ms_per_s"] for row in rows), 2
                )
        bare = entry["bare"]
        for kind in trials:
            if kind != "bare":
                entry[kind]["cpu_vs_bare"] = round(entry[kind]["us_per_record"] / bare["us_per_record"], 3)
                entry[kind]["rate_vs_bare"] = round(entry[kind]["records_per_s"] / bare["records_per_s"], 3)
        entry["target_cpu_vs_bare"] = TARGET
        entry["meets_target"] = entry["worker"]["cpu_vs_bare"] <= TARGET
        if "lean" in entry:
            entry["data_path_meets_target"] = entry["lean"]["cpu_vs_bare"] <= TARGET
        out.append(entry)
    return out


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """The summary as a markdown table."""
    lines = [
        "| records | loop | µs CPU per record (median) | every trial | records/s | CPU vs bare | records/s vs bare "
        "| samples | ms CPU per s at rest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        for kind in ("bare", "worker", "before", "lean"):
            if kind not in e:
                continue
            m = e[kind]
            ratio = "1.00x" if kind == "bare" else f"**{m['cpu_vs_bare']:.2f}x**"
            rate = "1.00x" if kind == "bare" else f"{m['rate_vs_bare']:.2f}x"
            trials = ", ".join(f"{u:.1f}" for u in m["us_per_record_trials"])
            rest = f"{m['idle_cpu_ms_per_s']:.1f}" if "idle_cpu_ms_per_s" in m else "-"
            lines.append(
                f"| {e['records']} | {kind} | {m['us_per_record']:.2f} | {trials} | {m['records_per_s']:,.0f} "
                f"| {ratio} | {rate} | {m['samples']} trials x {e['user_records_per_trial']:,} | {rest} |"
            )
    return "\n".join(lines)
