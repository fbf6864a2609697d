"""The data-path benchmark's CPU-per-record summary: medians, ratios, sample counts, CPU at rest."""

from __future__ import annotations

from typing import Any

from tools.datapath_cpu import cpu_per_record, cpu_table, shard_summary, shard_table, tcp_sockets


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


def _shard_trial(
    cpu_s: float, rest_ms: float, polls: float, threads: int, tcp: int, term: float
) -> dict[str, Any]:
    row = _trial(cpu_s, 2.0)
    row.update(
        idle_cpu_ms_per_s=rest_ms,
        polls_per_s=polls,
        get_records_per_s=polls - 1,
        peak_threads=threads,
        peak_tcp=tcp,
        term_to_exit_s=term,
    )
    return row


def test_the_shard_summary_gives_medians_every_trial_ratios_and_cpu_per_call_at_rest() -> None:
    trials = {
        64: {
            "bare": [_shard_trial(1.0, 100.0, 256.0, 65, 64, 0.5)],
            "worker": [_shard_trial(1.4, 150.0, 258.0, 9, 8, 1.0)],
        },
        4: {
            "bare": [_shard_trial(c, 20.0, 16.0, 5, 4, 0.2) for c in (0.2, 0.3, 0.25)],
            "worker": [
                _shard_trial(c, 30.0, 20.0, 11, 5, t) for c, t in ((0.3, 0.6), (0.25, 0.4), (0.35, 0.5))
            ],
        },
    }
    four, sixty_four = shard_summary(trials)  # in shard order
    assert four["shards"] == 4 and four["bare"]["samples"] == 3
    assert four["bare"]["cpu_s_per_1k"] == 0.025 and four["worker"]["cpu_s_per_1k"] == 0.03
    assert four["worker"]["cpu_s_per_1k_trials"] == [0.03, 0.025, 0.035]
    assert four["cpu_vs_bare"] == 1.2 and four["meets_target"]
    assert four["worker"]["term_to_exit_s"] == 0.5 and four["worker"]["term_to_exit_s_trials"] == [
        0.6,
        0.4,
        0.5,
    ]
    assert (
        four["bare"]["ms_cpu_per_poll_at_rest"] == 1.25 and four["worker"]["ms_cpu_per_poll_at_rest"] == 1.5
    )
    assert four["rest_cpu_vs_bare"] == 1.5
    assert sixty_four["cpu_vs_bare"] == 1.4 and not sixty_four["meets_target"]
    table = shard_table([four, sixty_four]).splitlines()
    assert len(table) == 2 + 4 and "**1.20x**" in table[3] and "**1.40x**" in table[5]
    assert "| 64 | bare | 0.100 | 1.00x |" in table[4] and "| 9 | 8 | 1.00 | 1 |" in table[5]


TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:A1B2 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 1111 1 0
   1: 0100007F:A1B3 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2222 1 0
"""


def test_tcp_sockets_counts_the_processes_socket_fds_that_the_tcp_tables_list() -> None:
    links = ["/dev/null", "socket:[1111]", "socket:[3333]", "pipe:[2222]", "anon_inode:[eventpoll]"]
    assert tcp_sockets(links, [TCP, TCP.splitlines()[0]]) == 1  # 3333: a unix socket; 2222 is a pipe here
    assert tcp_sockets([*links, "socket:[2222]"], [TCP]) == 2
    assert tcp_sockets([], [TCP]) == 0
