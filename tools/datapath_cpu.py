"""Summaries of ``bench.datapath``'s trials, pure so that they are tested: CPU per record next to the bare
boto3 loop (``--cpu-per-record``: µs of CPU of the whole process per user record), the cost per shard count
(``--shard-counts``), and the TCP sockets of a process."""

from __future__ import annotations

from statistics import median
from typing import Any

__all__ = ["cpu_per_record", "cpu_table", "shard_summary", "shard_table", "tcp_sockets"]

TARGET = 0.3  # the worker's CPU per record, at most this times the bare loop's (issue 23)
SHARD_TARGET = 1.3  # at every shard count, the worker's CPU per record vs the bare loop's (issue 26)


CPU_FIGURES = {"us_per_record": 3, "records_per_s": 0, "idle_cpu_ms_per_s": 2}  # figure -> digits kept
SHARD_FIGURES = {
    "cpu_s_per_1k": 3,
    "records_per_s": 0,
    "idle_cpu_ms_per_s": 1,
    "polls_per_s": 1,
    "get_records_per_s": 1,
    "peak_threads": 0,
    "peak_tcp": 0,
    "term_to_exit_s": 2,
}


def _loop(rows: list[dict[str, Any]], figures: dict[str, int]) -> dict[str, Any]:
    """One loop's trials: the sample count and, per figure the trials have, its median and every value."""
    loop: dict[str, Any] = {"samples": len(rows)}
    for name, digits in figures.items():
        if values := [float(row[name]) for row in rows if name in row]:
            loop[name] = round(median(values), digits)
            loop[f"{name}_trials"] = [round(v, digits) for v in values]
    return loop


def cpu_per_record(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per 4-shard kinesis-local scenario (plain, KPL), each loop's CPU per record, records/s and CPU at rest
    (``_loop``), and its ratios to the bare loop's."""
    out = []
    for r in results:
        settings = r["settings"]
        if settings["backend"] != "local" or settings["shards"] != 4:
            continue
        entry: dict[str, Any] = {
            "scenario": r["scenario"],
            "records": "KPL-aggregated" if settings["kpl"] else "plain",
            "user_records_per_trial": settings["records"],
            "per_aggregate": settings["per_aggregate"] if settings["kpl"] else None,
        }
        for kind, rows in r["trials"].items():  # "bare" first
            figures = [{**row, "us_per_record": row["cpu_s_per_100k"] * 10} for row in rows]
            loop = entry[kind] = _loop(figures, CPU_FIGURES)
            if kind != "bare":
                loop["cpu_vs_bare"] = round(loop["us_per_record"] / entry["bare"]["us_per_record"], 3)
                loop["rate_vs_bare"] = round(loop["records_per_s"] / entry["bare"]["records_per_s"], 3)
        entry["target_cpu_vs_bare"] = TARGET
        entry["meets_target"] = entry["worker"]["cpu_vs_bare"] <= TARGET
        if "lean" in entry:
            entry["data_path_meets_target"] = entry["lean"]["cpu_vs_bare"] <= TARGET
        out.append(entry)
    return out


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """The CPU-per-record summary as a markdown table."""
    lines = [
        "| records | loop | µs CPU per record (median) | every trial | records/s | CPU vs bare | records/s vs bare "
        "| samples | ms CPU per s at rest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in rows:
        for kind in [k for k in ("bare", "worker", "lean") if k in e]:
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


def shard_summary(trials: dict[int, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per shard count (``{shards: {"bare": [trial, ...], "worker": [...]}}``), each loop's figures (``_loop``)
    and CPU per call at rest (ms); the worker-vs-bare ratios and whether it is within ``SHARD_TARGET``."""
    out = []
    for shards in sorted(trials):
        entry: dict[str, Any] = {"shards": shards}
        for kind, rows in trials[shards].items():
            figures = [{**row, "cpu_s_per_1k": row["cpu_s_per_100k"] / 100} for row in rows]
            loop = _loop(figures, SHARD_FIGURES)
            if loop.get("polls_per_s"):
                loop["ms_cpu_per_poll_at_rest"] = round(loop["idle_cpu_ms_per_s"] / loop["polls_per_s"], 2)
            entry[kind] = loop
        if (bare := entry.get("bare")) and (worker := entry.get("worker")):
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
    """How many of a process's fds (their ``readlink`` targets, ``socket:[inode]``) are TCP sockets listed in
    ``/proc/<pid>/net/tcp`` or ``tcp6`` (their texts; the inode is the 10th column)."""
    inodes = {link[8:-1] for link in fd_links if link.startswith("socket:[")}
    tcp = {f[9] for table in tcp_tables for line in table.splitlines()[1:] if len(f := line.split()) > 9}
    return len(inodes & tcp)
