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

__all__ = [
    "SHARD_TARGET",
    "TARGET",
    "cpu_per_record",
    "cpu_table",
    "shard_summary",
    "shard_table",
    "tcp_sockets",
]

TARGET = 0.3  # the worker's CPU per record, at most this times the bare loop's (issue 23)
SHARD_TARGET = 1.3  # at every shard count, the worker's CPU per record vs the bare loop's (issue 26)


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


# -- cost per shard count (``bench.datapath --shard-counts``) ---------------------------------------------------
SHARD_FIGURES = {  # figure of a trial -> how the summary rounds its median
    "cpu_s_per_1k": 3,
    "records_per_s": 0,
    "idle_cpu_ms_per_s": 1,
    "polls_per_s": 1,
    "get_records_per_s": 1,
    "peak_threads": 0,
    "peak_tcp": 0,
    "term_to_exit_s": 2,
}


def _figures(row: dict[str, Any]) -> dict[str, float]:
    out = {k: float(row[k]) for k in SHARD_FIGURES if k in row}
    out["cpu_s_per_1k"] = row["cpu_s_per_100k"] / 100
    return out


def shard_summary(trials: dict[int, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per shard count (``{shards: {"bare": [trial, ...], "worker": [...]}}``): for each loop the median and every
    trial of each figure, the sample count, CPU at rest per call made at rest (ms), and the worker-vs-bare ratios
    of CPU per record and of CPU at rest, with whether CPU per record is within ``SHARD_TARGET``."""
    out = []
    for shards in sorted(trials):
        entry: dict[str, Any] = {"shards": shards}
        for kind, rows in trials[shards].items():
            figs = [_figures(r) for r in rows]
            loop: dict[str, Any] = {"samples": len(rows)}
            for name, digits in SHARD_FIGURES.items():
                values = [f[name] for f in figs if name in f]
                if values:
                    loop[name] = round(statistics.median(values), digits)
                    loop[f"{name}_trials"] = [round(v, digits) for v in values]
            if loop.get("polls_per_s"):
                loop["ms_cpu_per_poll_at_rest"] = round(loop["idle_cpu_ms_per_s"] / loop["polls_per_s"], 2)
            entry[kind] = loop
        bare, worker = entry.get("bare"), entry.get("worker")
        if bare and worker:
            entry["cpu_vs_bare"] = round(worker["cpu_s_per_1k"] / bare["cpu_s_per_1k"], 2)
            entry["rest_cpu_vs_bare"] = round(worker["idle_cpu_ms_per_s"] / bare["idle_cpu_ms_per_s"], 2)
            entry["meets_target"] = entry["cpu_vs_bare"] <= SHARD_TARGET
        out.append(entry)
    return out


def shard_table(summary: list[dict[str, Any]]) -> str:
    """The per-shard-count summary as a markdown table (medians; every trial in the JSON)."""
    lines = [
        "| shards | loop | CPU-s per 1k records | vs bare | records/s | CPU at rest (ms/s) | AWS calls/s at rest "
        "(GetRecords) | ms CPU per call at rest | peak threads | peak TCP | SIGTERM to exit (s) | samples |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in summary:
        for kind in ("bare", "worker"):
            m = e[kind]
            ratio = "1.00x" if kind == "bare" else f"**{e['cpu_vs_bare']:.2f}x**"
            lines.append(
                f"| {e['shards'] if kind == 'bare' else ''} | {kind} | {m['cpu_s_per_1k']:.3f} | {ratio} "
                f"| {m['records_per_s']:,.0f} | {m['idle_cpu_ms_per_s']:.1f} | {m['polls_per_s']:.1f} "
                f"({m['get_records_per_s']:.1f}) | {m.get('ms_cpu_per_poll_at_rest', 0):.2f} "
                f"| {m['peak_threads']:.0f} | {m['peak_tcp']:.0f} | {m['term_to_exit_s']:.2f} | {m['samples']} |"
            )
    return "\n".join(lines)


def tcp_sockets(fd_links: list[str], tcp_tables: list[str]) -> int:
    """How many of a process's file descriptors (their ``readlink`` targets, ``socket:[inode]``) are TCP
    sockets listed in ``/proc/<pid>/net/tcp`` or ``tcp6`` (their texts; the inode is the 10th column)."""
    inodes = {link[8:-1] for link in fd_links if link.startswith("socket:[")}
    tcp = {
        fields[9]
        for table in tcp_tables
        for line in table.splitlines()[1:]
        if len(fields := line.split()) > 9
    }
    return len(inodes & tcp)
