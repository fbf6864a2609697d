"""The data-path benchmark's CPU-per-record summary: medians, ratios, sample counts, CPU at rest."""

from __future__ import annotations

from typing import Any

from tools.datapath_cpu import cpu_per_record, cpu_table


def _trial(cpu_s: float, wall_s: float, idle: float | None = None) -> dict[str, Any]:
    row = {"records": 10_000, "cpu_s": cpu_s, "wall_s": wall_s, "records_per_s": 10_000 / wall_s}
    row["cpu_s_per_100k"] = cpu_s / 10_000 * 100_000
    if idle is not None:
        row["idle_cpu_ms_per_s"] = idle
    return row


def _result(kpl: bool, idle: bool) -> dict[str, Any]:
    def trials(cpus: list[float], fixed: float) -> list[dict[str, Any]]:
        return [_trial(c, 2.0, fixed if idle else None) for c in cpus]

    return {
        "scenario": "kinesis-local, KPL" if kpl else "kinesis-local, plain",
        "settings": {"backend": "local", "shards": 4, "records": 10_000, "kpl": kpl, "per_aggregate": 100},
        "trials": {
            "bare": trials([0.2, 0.22, 0.18], 20.0),
            "worker": trials([0.05, 0.06, 0.04], 10.0),
            "lean": trials([0.04, 0.03, 0.05], 5.0),
        },
    }


def test_summary_gives_medians_ratios_and_sample_counts() -> None:
    out = cpu_per_record([_result(False, idle=True), _result(True, idle=False)])
    plain, kpl = out
    assert plain["records"] == "plain" and kpl["records"] == "KPL-aggregated"
    assert plain["bare"]["us_per_record"] == 20.0 and plain["worker"]["us_per_record"] == 5.0
    assert plain["worker"]["cpu_vs_bare"] == 0.25 and plain["meets_target"]
    assert plain["worker"]["samples"] == 3 and plain["user_records_per_trial"] == 10_000
    assert plain["lean"]["cpu_vs_bare"] == 0.2 and plain["data_path_meets_target"]
    assert plain["bare"]["idle_cpu_ms_per_s"] == 20.0 and plain["worker"]["idle_cpu_ms_per_s"] == 10.0
    assert "idle_cpu_ms_per_s" not in kpl["worker"]
    table = cpu_table(out)
    assert "**0.25x**" in table and "**0.20x**" in table and "3 trials x 10,000" in table


def test_only_the_four_shard_kinesis_local_scenarios_are_summarised() -> None:
    memory = {**_result(False, idle=False), "settings": {"backend": "memory", "shards": 4, "kpl": False}}
    assert cpu_per_record([memory]) == []
