"""The data-path benchmark (``make bench-datapath``): the worker next to a bare GetRecords loop.

Both read the same backlog, interleaved, each trial a process of its own (``bench.datapath_trial``, or
``python -m consumer run`` with DynamoDB on moto): kinesis-local and the in-memory seams (one core), plain and
KPL, 16 shards for peak RSS. ``--cpu-per-record``: the 4-shard kinesis-local scenarios with the worker's data
path alone and CPU at rest. ``--shard-counts``: per shard count, also AWS calls at rest, peak threads and TCP
connections, SIGTERM to exit. Summaries: :mod:`tools.datapath_cpu`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from subprocess import DEVNULL
from typing import Any

from bench import REPORTS, table_head, write_report
from bench.datapath_trial import Window, local_backlog, memory_backlog, payload, run_worker
from bench.pipeline import process_cpu
from consumer.config import LeaseConfig, RetrievalConfig
from consumer.dynamo import create_tables
from tools.cli import COUNT, SECONDS, Parser, at_least
from tools.datapath_cpu import cpu_per_record, cpu_table, shard_summary, shard_table, tcp_sockets
from tools.emulators import Emulators

__all__ = ["Scenario", "main"]

REPO = Path(__file__).resolve().parents[1]
IDLE = RetrievalConfig().idle_time_between_reads  # the production cadence (0.25 s)
LIMIT = RetrievalConfig().max_records
REST_AFTER = LeaseConfig().lease_duration / 2 + 0.5  # a leader polls fast for half a lease after a plan


@dataclass(frozen=True)
class Scenario:
    """A backlog the loops read: on kinesis-local (``local``) or the in-memory seams (``memory``)."""

    name: str
    backend: str
    shards: int
    records: int  # user records
    kpl: bool = False
    per_aggregate: int = 100


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    """The scenarios of a run: with ``--cpu-per-record`` only the first two."""
    out = [
        Scenario("kinesis-local, plain", "local", 4, args.records),
        Scenario("kinesis-local, KPL", "local", 4, args.records, kpl=True),
        Scenario("in-memory, plain", "memory", 4, args.memory_records),
        Scenario("in-memory, KPL", "memory", 4, args.memory_records, kpl=True),
        Scenario("kinesis-local, 16 shards (RSS)", "local", 16, args.rss_records),
    ]
    return out[:2] if args.cpu_per_record else out


def worker_env(ddb: Any, stream: str, application: str, **settings: object) -> dict[str, str]:
    """The environment of ``python -m consumer run`` on ``stream``: new tables of its own (created on ``ddb``),
    metrics once a minute, and ``settings`` (``log_level="INFO"`` is ``CONSUMER_LOG_LEVEL=INFO``)."""
    suffix = uuid.uuid4().hex[:8]
    leases, checkpoints = f"{application}-leases-{suffix}", f"{application}-cps-{suffix}"
    create_tables(ddb, leases, checkpoints)
    named = {"application": application, "streams": stream, "worker_id": f"{application}-{suffix}"}
    named.update(lease_table=leases, checkpoint_table=checkpoints, metrics_interval_seconds="60")
    return {f"CONSUMER_{k.upper()}": str(v) for k, v in {**named, **settings}.items()}


def _peaks(pid: int, peak: dict[str, int]) -> None:
    """Raise ``peak`` to the process's threads and open TCP sockets (its socket fds /proc/<pid>/net/tcp* lists)."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            links.append(os.readlink(fd))
    tcp = tcp_sockets(links, [Path(f"/proc/{pid}/net/{n}").read_text() for n in ("tcp", "tcp6")])
    peak["peak_tcp"] = max(peak["peak_tcp"], tcp)
    peak["peak_threads"] = max(peak["peak_threads"], len(os.listdir(f"/proc/{pid}/task")))


def _calls(path: Path) -> dict[str, Any]:
    """The AWS calls the process counted so far (``bench.datapath_trial.count_calls``)."""
    return dict(json.loads(path.read_text())) if path.exists() else {"calls": {}, "at": time.monotonic()}


def _watch(
    proc: subprocess.Popen[bytes], result: Path, timeout: float, rest: float, calls: Path
) -> dict[str, Any]:
    """Sample the process's peak threads and TCP connections until it has read the backlog (``result``); with
    ``rest``, its CPU and AWS ``calls`` per second over ``rest`` seconds from half a lease (plus 0.5 s) after
    its first record, at the earliest 1 s after its last; then SIGTERM and the time to its exit."""
    peak = {"peak_threads": 0, "peak_tcp": 0}
    deadline = time.monotonic() + timeout
    while not result.exists() or not result.read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"exited {proc.returncode} before the end of the backlog")
        if time.monotonic() > deadline:
            raise RuntimeError("did not read the backlog in time")
        _peaks(proc.pid, peak)
        time.sleep(0.1)
    out: dict[str, Any] = json.loads(result.read_text())
    if rest:  # past the last checkpoints and the leader's fast polls after its first plan
        time.sleep(max(1.0, REST_AFTER - out["wall_s"]))
        cpu0, wall0, calls0 = process_cpu(proc.pid), time.perf_counter(), _calls(calls)
        while time.perf_counter() - wall0 < rest:
            _peaks(proc.pid, peak)
            time.sleep(0.2)
        cpu1, wall1, calls1 = process_cpu(proc.pid), time.perf_counter(), _calls(calls)
        out["idle_cpu_ms_per_s"] = (cpu1 - cpu0) / (wall1 - wall0) * 1e3
        span = calls1["at"] - calls0["at"] or 1.0
        moved = {op: n - calls0["calls"].get(op, 0) for op, n in calls1["calls"].items()}
        out["polls_per_s"] = sum(moved.values()) / span
        out["get_records_per_s"] = moved.get("GetRecords", 0) / span
        out["rest_calls"] = {op: n for op, n in sorted(moved.items()) if n}
    began = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return {**out, **peak, "term_to_exit_s": time.perf_counter() - began}


class Bench:
    """Runs trials in ``workdir`` on ``emulators`` (kinesis-local, DynamoDB on moto) or the in-memory seams."""

    def __init__(self, args: argparse.Namespace, workdir: Path, emulators: Any) -> None:
        self.args, self.workdir = args, workdir
        self.env = {**os.environ, **emulators.endpoints.env()}
        self.kinesis, self.ddb = emulators.client("kinesis"), emulators.client("dynamodb")

    def run(
        self, sc: Scenario, kinds: tuple[str, ...], shard_mode: bool = False
    ) -> dict[str, list[dict[str, Any]]]:
        """Trials of each loop of ``kinds`` on ``sc``, interleaved (in order, then reversed)."""
        kpl = sc.per_aggregate if sc.kpl else 0
        stream = (
            local_backlog(self.kinesis, sc.shards, sc.records, per_aggregate=kpl)
            if sc.backend == "local"
            else ""
        )
        rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
        for rep in range(self.args.repeats):
            for kind in kinds if rep % 2 == 0 else kinds[::-1]:
                row = self.trial(kind, sc, stream, shard_mode)
                rows[kind].append(row)
                shown = {k: round(v, 3) for k, v in row.items() if isinstance(v, float | int)}
                print(f"  {kind:6s} {json.dumps(shown)[1:-1]}", flush=True)
        if stream:
            self.kinesis.delete_stream(StreamName=stream)
        return rows

    def trial(self, kind: str, sc: Scenario, stream: str, shard_mode: bool) -> dict[str, Any]:
        """One trial of loop ``kind`` on ``sc`` (``stream`` on kinesis-local). Rest: ``--rest`` with
        ``--shard-counts``, else ``--idle-after`` on kinesis-local."""
        result, calls = self.workdir / "result.json", self.workdir / "calls.json"
        result.unlink(missing_ok=True)
        calls.unlink(missing_ok=True)
        env = {**self.env, "DATAPATH_TARGET": str(sc.records)}
        env.update(DATAPATH_RESULT=str(result), DATAPATH_CALLS=str(calls))
        if sc.backend == "local" and kind == "worker":
            settings = {"idle_time_seconds": IDLE, "max_records": LIMIT}  # else production's settings
            processor = "bench.datapath_trial:CountingProcessor"
            env.update(
                worker_env(self.ddb, stream, "datapath", log_level="WARNING", processor=processor, **settings)
            )
            cmd = ["consumer", "run"]
        else:
            spec = {**asdict(sc), "kind": kind, "stream": stream}
            cmd = ["bench.datapath_trial", json.dumps({**spec, "idle": IDLE, "limit": LIMIT})]
        rest = self.args.rest if shard_mode else self.args.idle_after if sc.backend == "local" else 0.0
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", *cmd], env=env, cwd=REPO, stdout=DEVNULL, stderr=err
            )
            try:
                return _watch(proc, result, self.args.timeout, rest, calls)
            except RuntimeError as e:
                err.seek(0)
                raise RuntimeError(f"{kind} on {sc.name}: {e}: {err.read()[-2000:]!r}") from None
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


LABELS = {"bare": "bare loop", "worker": "worker", "lean": "data path alone"}


def table(results: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """The main run's markdown table and its settings."""
    lines = table_head(
        "scenario | loop | records/s | CPU-s per 100k records | peak RSS (MB) | records/s vs bare | CPU vs bare "
        "| RSS vs bare | start-up CPU-s"
    )
    for r in results:
        for kind, m in r["loops"].items():
            ratio = r["ratios"][kind]
            lines.append(
                f"| {r['scenario']} | {LABELS[kind]} | {m['records_per_s']:,.0f} | {m['cpu_s_per_100k']:.3f} | "
                f"{m['peak_rss_mb']:.0f} | {ratio['records_per_s']:.2f}x | {ratio['cpu_s_per_100k']:.2f}x | "
                f"{ratio['peak_rss_mb']:.2f}x | {m['start_cpu_s']:.2f} |"
            )
    lines.append(
        f"\nMedians of {settings['repeats']} interleaved repeats, each trial its own process; settings in the JSON."
    )
    return "\n".join(lines)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def shard_counts(bench: Bench, args: argparse.Namespace, settings: dict[str, Any], out: Path) -> None:
    """``--shard-counts``: the trials, their summary (``tools.datapath_cpu.shard_summary``), JSON and markdown."""
    trials: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for n in args.shard_counts:
        print(f"{n} shards: {n * args.records_per_shard:,} records", flush=True)
        sc = Scenario(f"{n} shards", "local", n, n * args.records_per_shard)
        trials[n] = bench.run(sc, ("bare", "worker"), shard_mode=True)
    settings.update(records_per_shard=args.records_per_shard, record_bytes=len(payload(0)), rest_s=args.rest)
    settings.update(scan_interval_s=LeaseConfig().scan_interval, load_avg_after=_load())
    summary = shard_summary(trials)
    md = shard_table(summary) + f"\n\n{args.repeats} trials per loop and shard count; settings in the JSON."
    trials_json = {str(n): rows for n, rows in trials.items()}
    write_report(out, {"settings": settings, "summary": summary, "trials": trials_json}, md)


def exits_in_memory(args: argparse.Namespace, settings: dict[str, Any], out: Path) -> None:
    """``--exit-in-memory``: per shard count, a worker on the in-memory seams that has read its backlog and
    rested half a lease, from its shutdown request to the end of its ``run`` (in this process): the worker's
    own part of SIGTERM to exit, without an emulator's answers or the interpreter's exit."""
    exits: dict[int, list[float]] = {n: [] for n in args.shard_counts}
    settings.update(records_per_shard=args.records_per_shard, rest_s=REST_AFTER, scan_interval_s=0.1)
    for n in args.shard_counts:
        for _ in range(args.repeats):
            window, stop, asked = Window(n * args.records_per_shard), threading.Event(), [0.0]

            def rested(
                window: Window = window, stop: threading.Event = stop, asked: list[float] = asked
            ) -> None:
                window.done.wait(args.timeout)
                time.sleep(REST_AFTER)  # past the leader's fast polls after its first plan
                asked[0] = time.perf_counter()
                stop.set()

            threading.Thread(target=rested, daemon=True).start()
            run_worker(memory_backlog(n, args.records_per_shard), window, stop, RetrievalConfig())
            exits[n].append(time.perf_counter() - asked[0])
            print(f"  {n} shards: {exits[n][-1]:.3f} s", flush=True)
    summary = {
        n: {"median_s": statistics.median(x), "max_s": max(x), "samples": len(x)} for n, x in exits.items()
    }
    rows = [f"| {n} | {m['median_s']:.3f} / {m['max_s']:.3f} | {m['samples']} |" for n, m in summary.items()]
    md = "\n".join(table_head("shards | shutdown request to end of run, median / max (s) | samples") + rows)
    write_report(out, {"settings": settings, "summary": summary, "trials": exits}, md)


def main(argv: list[str] | None = None) -> int:
    """Parse the options and run the benchmark."""
    p = Parser(prog="python -m bench.datapath", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--records", type=COUNT, default=60_000, help="kinesis-local backlog (user records)")
    p.add_argument("--memory-records", type=COUNT, default=400_000, help="in-memory backlog (user records)")
    p.add_argument("--rss-records", type=COUNT, default=48_000, help="16-shard backlog for peak RSS")
    p.add_argument("--repeats", type=COUNT, help="default 3 (5 with --cpu-per-record)")
    p.add_argument("--cpu-per-record", action="store_true", help="only the CPU-per-record comparison")
    p.add_argument("--timeout", type=SECONDS, default=600.0)
    p.add_argument(
        "--idle-after", type=at_least(0, float), help="seconds measured at rest (5 with --cpu-per-record)"
    )
    p.add_argument("--shard-counts", type=COUNT, nargs="+", help="only the cost per shard count")
    p.add_argument("--records-per-shard", type=COUNT, default=1000, help="--shard-counts: backlog per shard")
    p.add_argument("--rest", type=SECONDS, default=5.0, help="--shard-counts: seconds measured at rest")
    p.add_argument("--exit-in-memory", action="store_true", help="--shard-counts: the worker's own exit")
    args = p.parse_args(argv)
    if args.exit_in_memory and not args.shard_counts:
        p.error("--exit-in-memory needs --shard-counts")
    args.repeats = args.repeats or (5 if args.cpu_per_record else 3)
    args.idle_after = (5.0 if args.cpu_per_record else 0.0) if args.idle_after is None else args.idle_after
    name = "datapath-shards" if args.shard_counts else "datapath-cpu" if args.cpu_per_record else "datapath"
    name = "datapath-exit-memory" if args.exit_in_memory else name
    out = REPORTS / f"{name}.json"
    settings = {"idle_time_s": IDLE, "limit": LIMIT, "repeats": args.repeats, "cpus": os.cpu_count()}
    settings["load_avg_before"] = _load()
    if args.exit_in_memory:
        exits_in_memory(args, settings, out)
        return 0
    with Emulators() as emulators, tempfile.TemporaryDirectory(prefix="datapath-") as tmp:
        bench = Bench(args, Path(tmp), emulators)
        if args.shard_counts:
            shard_counts(bench, args, settings, out)
            return 0
        settings.update(prefetch_batches=RetrievalConfig().prefetch_batches, idle_after_s=args.idle_after)
        settings["per_aggregate"] = Scenario.per_aggregate
        kinds = ("bare", "worker", "lean") if args.cpu_per_record else ("bare", "worker")
        keys, results = ("records_per_s", "cpu_s_per_100k", "peak_rss_mb", "wall_s", "start_cpu_s"), []
        for sc in scenarios(args):
            print(f"{sc.name}: {sc.records:,} records over {sc.shards} shards", flush=True)
            rows = bench.run(sc, kinds)
            loops = {
                kind: {k: statistics.median(r[k] for r in rs) for k in keys} for kind, rs in rows.items()
            }
            ratios = {kind: {k: m[k] / loops["bare"][k] for k in m} for kind, m in loops.items()}
            results.append({"scenario": sc.name, "settings": asdict(sc), "loops": loops, "ratios": ratios})
            results[-1]["trials"] = rows
    cpu = cpu_per_record(results)
    md = table(results, settings)
    if cpu:
        md += "\n\nCPU per user record, worker vs bare boto3 loop (target <= 0.3x):\n\n" + cpu_table(cpu)
    write_report(out, {"settings": settings, "cpu_per_record": cpu, "results": results}, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
