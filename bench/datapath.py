"""The data-path benchmark (``make bench-datapath``): the worker next to a bare GetRecords loop.

Both read the same backlog in the same run, interleaved (bare, worker, worker, bare, ...), each trial in a
process of its own: on kinesis-local (the worker is ``python -m consumer run`` with DynamoDB on moto and
auto checkpoints) and on the in-memory seams (pinned to one core), with plain and KPL-aggregated records,
and a 16-shard backlog for peak RSS. Measured inside the process from the first record to the last:
records/s, CPU seconds (all threads) per 100k records, peak RSS. Medians over the repeats; JSON in
``reports/bench/datapath.json`` and a markdown table in ``reports/bench/datapath.md``. ``--profile`` also
records py-spy profiles of the worker (``--before REF`` adds the same for an earlier commit).

``--shard-counts 4 16 64 128``: instead, per shard count, the worker and the bare loop on one pre-loaded
stream of that many shards (kinesis-local, emulator limits on), and besides CPU per record and records/s,
from outside the process: its CPU and AWS calls per second at rest, its peak threads and open TCP connections
(``/proc``), and SIGTERM to exit (``reports/bench/datapath-shards.json``, :mod:`tools.datapath_cpu`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.datapath_trial import aggregate, payload
from consumer.config import LeaseConfig, RetrievalConfig
from consumer.dynamo import create_tables
from tools.datapath_cpu import cpu_per_record, cpu_table, shard_summary, shard_table, tcp_sockets

__all__ = ["Scenario", "main"]

REPO = Path(__file__).resolve().parents[1]
IDLE = RetrievalConfig().idle_time_between_reads  # the production cadence (0.25 s)
LIMIT = RetrievalConfig().max_records
REST_AFTER = LeaseConfig().lease_duration / 2 + 0.5  # a leader polls fast for half a lease after a plan
PREFETCH = RetrievalConfig().prefetch_batches


@dataclass(frozen=True)
class Scenario:
    name: str
    backend: str  # "local" (kinesis-local + moto) or "memory"
    shards: int
    records: int  # user records
    kpl: bool
    idle: float
    per_aggregate: int = 100


def scenarios(args: argparse.Namespace) -> list[Scenario]:
    out = [
        Scenario("kinesis-local, plain", "local", 4, args.records, False, IDLE),
        Scenario("kinesis-local, KPL", "local", 4, args.records, True, IDLE),
        Scenario("in-memory, plain", "memory", 4, args.memory_records, False, 0.0),
        Scenario("in-memory, KPL", "memory", 4, args.memory_records, True, 0.0),
        Scenario("kinesis-local, 16 shards (RSS)", "local", 16, args.rss_records, False, IDLE),
    ]
    return [s for s in out if not args.only or any(o in s.name for o in args.only)]


def _fill(kinesis: Any, stream: str, sc: Scenario) -> None:
    """Put the backlog: plain records 500 per PutRecords; KPL aggregates of ``per_aggregate`` records."""
    entries: list[dict[str, Any]] = []
    if sc.kpl:
        for first in range(0, sc.records, sc.per_aggregate):
            entries.append({"Data": aggregate(first, sc.per_aggregate), "PartitionKey": f"agg-{first}"})
    else:
        entries = [{"Data": payload(i), "PartitionKey": f"pk-{i}"} for i in range(sc.records)]
    for i in range(0, len(entries), 500):
        chunk = entries[i : i + 500]
        while chunk:
            out = kinesis.put_records(StreamName=stream, Records=chunk)
            chunk = [e for e, r in zip(chunk, out["Records"], strict=True) if "ErrorCode" in r]


def _backlog(kinesis: Any, sc: Scenario) -> str:
    """A new stream of ``sc.shards`` shards holding ``sc``'s backlog; its name."""
    stream = f"dp-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=sc.shards)
    status = ""
    while status != "ACTIVE":
        time.sleep(0.1)
        status = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"
        ]
    began = time.monotonic()
    _fill(kinesis, stream, sc)
    print(f"  backlog of {sc.records:,} records put in {time.monotonic() - began:.0f}s", flush=True)
    return stream


def _run_trial(spec: dict[str, Any], env: dict[str, str], timeout: float, cwd: Path = REPO) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.datapath_trial", json.dumps(spec)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"trial {spec['kind']} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _worker_env(
    base: dict[str, str], stream: str, sc: Scenario, result: Path, extra: dict[str, str]
) -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return {
        **base,
        "CONSUMER_APPLICATION": "datapath",
        "CONSUMER_STREAMS": stream,
        "CONSUMER_PROCESSOR": "bench.datapath_processor:CountingProcessor",
        "CONSUMER_LEASE_TABLE": f"dp-leases-{suffix}",
        "CONSUMER_CHECKPOINT_TABLE": f"dp-cps-{suffix}",
        "CONSUMER_WORKER_ID": f"dp-{suffix}",
        "CONSUMER_IDLE_TIME_SECONDS": str(sc.idle),
        "CONSUMER_MAX_RECORDS": str(LIMIT),
        "CONSUMER_SCAN_INTERVAL_SECONDS": "0.5",
        "CONSUMER_METRICS_INTERVAL_SECONDS": "60",
        "CONSUMER_LOG_LEVEL": "WARNING",
        "DATAPATH_TARGET": str(sc.records),
        "DATAPATH_RESULT": str(result),
        **extra,
    }


def _run_cli_worker(
    ddb: Any,
    env: dict[str, str],
    result: Path,
    timeout: float,
    profile: list[str] | None = None,
    cwd: Path = REPO,
    idle_after: float = 0.0,
) -> dict[str, Any]:
    """``python -m consumer run`` until it has processed the backlog (its processor writes the result);
    ``profile``: a py-spy command line that attaches to it (``--pid`` is appended) for the whole run."""
    create_tables(ddb, env["CONSUMER_LEASE_TABLE"], env["CONSUMER_CHECKPOINT_TABLE"])
    result.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "consumer", "run"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    spy = (
        None
        if profile is None
        else subprocess.Popen(
            [*profile, "--pid", str(proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    )
    deadline = time.monotonic() + timeout
    try:
        while not result.exists() or not result.read_text():
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else b""
                raise RuntimeError(f"worker exited {proc.returncode}: {err[-2000:]!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("worker did not process the backlog in time")
            time.sleep(0.05)
        out: dict[str, Any] = json.loads(result.read_text())
        if idle_after:  # the worker's CPU per second once caught up (leases, heartbeats, empty polls)
            cpu0, wall0 = _process_cpu(proc.pid), time.perf_counter()
            time.sleep(idle_after)
            out["idle_cpu_ms_per_s"] = (_process_cpu(proc.pid) - cpu0) / (time.perf_counter() - wall0) * 1e3
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its profile and detaches
            spy.wait(60)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return out


def _process_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("Threads:")))


def _proc_tcp(pid: int) -> int:
    """Open TCP sockets of the process: its socket fds that /proc/<pid>/net/tcp{,6} lists."""
    links = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            links.append(os.readlink(fd))
        except OSError:  # closed meanwhile
            continue
    tables = [Path(f"/proc/{pid}/net/{n}").read_text() for n in ("tcp", "tcp6")]
    return tcp_sockets(links, tables)


def _calls(path: Path) -> dict[str, Any]:
    """The AWS calls the process counted so far (``bench.datapath_processor.count_calls``)."""
    return dict(json.loads(path.read_text())) if path.exists() else {"calls": {}, "at": time.monotonic()}


def _observe(
    proc: subprocess.Popen[bytes], result: Path, calls: Path, rest: float, timeout: float
) -> dict[str, Any]:
    """Sample the process's threads and TCP connections until it has read the backlog (its result file), then
    ``rest`` seconds at rest (CPU and AWS calls per second; from ``REST_AFTER`` after the first record at the
    earliest), then SIGTERM and the time until it has exited."""
    peak = {"threads": 0, "tcp": 0}

    def sample() -> None:
        peak["threads"] = max(peak["threads"], _proc_threads(proc.pid))
        peak["tcp"] = max(peak["tcp"], _proc_tcp(proc.pid))

    deadline = time.monotonic() + timeout
    while not result.exists() or not result.read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"trial exited {proc.returncode} before the end of the backlog")
        if time.monotonic() > deadline:
            raise RuntimeError("trial did not read the backlog in time")
        sample()
        time.sleep(0.1)
    out: dict[str, Any] = json.loads(result.read_text())
    # At rest: the last batches' checkpoints written, and past the fast polls after the leader's first plan
    # (made just before the first record, ``wall_s`` before the last).
    time.sleep(max(1.0, REST_AFTER - out["wall_s"]))
    cpu0, wall0, calls0 = _process_cpu(proc.pid), time.perf_counter(), _calls(calls)
    while time.perf_counter() - wall0 < rest:
        sample()
        time.sleep(0.2)
    cpu1, wall1, calls1 = _process_cpu(proc.pid), time.perf_counter(), _calls(calls)
    span = calls1["at"] - calls0["at"] or 1.0
    moved = {op: n - calls0["calls"].get(op, 0) for op, n in calls1["calls"].items()}
    out["idle_cpu_ms_per_s"] = (cpu1 - cpu0) / (wall1 - wall0) * 1e3
    out["polls_per_s"] = sum(moved.values()) / span
    out["get_records_per_s"] = moved.get("GetRecords", 0) / span
    out["rest_calls"] = {op: n for op, n in sorted(moved.items()) if n}
    out["peak_threads"], out["peak_tcp"] = peak["threads"], peak["tcp"]
    began = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RuntimeError("trial did not exit within 60 s of SIGTERM") from None
    out["term_to_exit_s"] = time.perf_counter() - began
    return out


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in rows))


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {k: _median(rows, k) for k in ("records_per_s", "cpu_s_per_100k", "peak_rss_mb", "wall_s")}


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.emulators: Any = None
        self.env = dict(os.environ)

    def local(self) -> tuple[Any, Any]:
        if self.emulators is None:
            from tools.emulators import Emulators

            self.emulators = Emulators().start()
            self.env = {**os.environ, **self.emulators.endpoints.env()}
        return self.emulators.client("kinesis"), self.emulators.client("dynamodb")

    def stop(self) -> None:
        if self.emulators is not None:
            self.emulators.stop()

    def run_local(self, sc: Scenario) -> dict[str, list[dict[str, Any]]]:
        kinesis, ddb = self.local()
        stream = _backlog(kinesis, sc)
        rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in self.kinds(local=True)}
        result = self.workdir / "worker.json"
        for rep in range(self.args.repeats):
            for kind in self.order(rep, local=True):
                if kind in ("bare", "lean"):
                    spec = {
                        "kind": f"{kind}-local",
                        "stream": stream,
                        "records": sc.records,
                        "kpl": sc.kpl,
                        "idle": sc.idle,
                        "limit": LIMIT,
                        "idle_after": self.args.idle_after,
                    }
                    row = _run_trial(spec, self.env, self.args.timeout)
                else:
                    env = _worker_env(self.env, stream, sc, result, {})
                    code = self.code(kind == "before")
                    row = _run_cli_worker(
                        ddb, env, result, self.args.timeout, cwd=code, idle_after=self.args.idle_after
                    )
                rows[kind].append(row)
                print(
                    f"  {kind:6s} {row['records_per_s']:>10,.0f} rec/s  {row['cpu_s_per_100k']:.2f} CPU-s/100k  "
                    f"{row['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
        if self.args.profile and sc.shards == 4:  # the 16-shard run is there for memory
            self.profile_local(ddb, stream, sc)
        return rows

    def run_shards(self, shards: int) -> dict[str, list[dict[str, Any]]]:
        """The worker and the bare loop, interleaved, on one pre-loaded stream of ``shards`` shards."""
        kinesis, ddb = self.local()
        sc = Scenario(f"{shards} shards", "local", shards, shards * self.args.records_per_shard, False, IDLE)
        stream = _backlog(kinesis, sc)
        rows: dict[str, list[dict[str, Any]]] = {"bare": [], "worker": []}
        result, calls = self.workdir / "result.json", self.workdir / "calls.json"
        for rep in range(self.args.repeats):
            for kind in ("bare", "worker") if rep % 2 == 0 else ("worker", "bare"):
                result.unlink(missing_ok=True)
                calls.unlink(missing_ok=True)
                extra = {"DATAPATH_CALLS": str(calls), "DATAPATH_RESULT": str(result)}
                if kind == "bare":
                    spec = dict(kind="bare-local", stream=stream, records=sc.records, kpl=False, idle=IDLE)
                    spec.update(limit=LIMIT, until_term=True, shards=shards)
                    cmd = [sys.executable, "-m", "bench.datapath_trial", json.dumps(spec)]
                    env = {**self.env, **extra}
                else:
                    scan = str(LeaseConfig().scan_interval)  # the production cadence at rest
                    env = _worker_env(
                        self.env, stream, sc, result, {**extra, "CONSUMER_SCAN_INTERVAL_SECONDS": scan}
                    )
                    create_tables(ddb, env["CONSUMER_LEASE_TABLE"], env["CONSUMER_CHECKPOINT_TABLE"])
                    cmd = [sys.executable, "-m", "consumer", "run"]
                with tempfile.TemporaryFile() as err:
                    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
                    try:
                        row = _observe(proc, result, calls, self.args.rest, self.args.timeout)
                    except RuntimeError as e:
                        if proc.poll() is None:
                            proc.kill()
                        err.seek(0)
                        raise RuntimeError(
                            f"{kind} at {shards} shards: {e}: {err.read()[-2000:]!r}"
                        ) from None
                rows[kind].append(row)
                print(
                    f"  {kind:6s} {row['records_per_s']:>8,.0f} rec/s  {row['cpu_s_per_100k'] / 100:.3f} CPU-s/1k  "
                    f"rest {row['idle_cpu_ms_per_s']:.0f} ms/s {row['polls_per_s']:.1f} calls/s  "
                    f"threads {row['peak_threads']}  tcp {row['peak_tcp']}  SIGTERM {row['term_to_exit_s']:.2f}s",
                    flush=True,
                )
        kinesis.delete_stream(StreamName=stream)
        return rows

    def run_memory(self, sc: Scenario) -> dict[str, list[dict[str, Any]]]:
        rows: dict[str, list[dict[str, Any]]] = {kind: [] for kind in self.kinds()}
        base = {
            "records": sc.records,
            "shards": sc.shards,
            "kpl": sc.kpl,
            "idle": sc.idle,
            "limit": LIMIT,
            "per_aggregate": sc.per_aggregate,
            "cpu": self.args.cpu,
        }
        for rep in range(self.args.repeats):
            for kind in self.order(rep):
                spec = {**base, "kind": "bare-memory" if kind == "bare" else "worker-memory"}
                row = _run_trial(spec, self.env, self.args.timeout, self.code(kind == "before"))
                rows[kind].append(row)
                print(
                    f"  {kind:6s} {row['records_per_s']:>10,.0f} rec/s  {row['cpu_s_per_100k']:.3f} CPU-s/100k  "
                    f"{row['peak_rss_mb']:.0f} MB",
                    flush=True,
                )
        if self.args.profile and not sc.kpl:
            self.profile_memory(base)
        return rows

    def kinds(self, local: bool = False) -> tuple[str, ...]:
        """The bare loop, the worker, with ``--before`` the worker of that commit, and on kinesis-local with
        ``--cpu-per-record`` the worker's data path alone in the bare loop's place."""
        kinds = ("bare", "worker", "before") if self.args.before else ("bare", "worker")
        return (*kinds, "lean") if local and self.args.cpu_per_record else kinds

    def order(self, rep: int, local: bool = False) -> tuple[str, ...]:
        kinds = self.kinds(local)
        return kinds if rep % 2 == 0 else tuple(reversed(kinds))

    # -- py-spy profiles of the worker ------------------------------------------------------------
    def _pyspy(self, name: str) -> list[str]:
        out = REPO / "reports" / "bench" / "profiles" / f"{name}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        beside = Path(sys.executable).parent / "py-spy"
        return [
            os.environ.get("PY_SPY") or (str(beside) if beside.exists() else "py-spy"),
            "record",
            "-r",
            "250",
            "-f",
            "raw",
            "-o",
            str(out),
        ]

    def code(self, before: bool) -> Path:
        """Where trials run from: the repository, or a tree with ``--before``'s consumer package (and this
        benchmark's own trial modules, which only use what both versions have)."""
        if not before:
            return REPO
        tree = self.workdir / "before"
        if not tree.exists():
            (tree / "bench").mkdir(parents=True)
            archive = subprocess.run(
                ["git", "archive", self.args.before, "consumer"], cwd=REPO, check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
            for name in ("__init__.py", "datapath_trial.py", "datapath_processor.py"):
                shutil.copy(REPO / "bench" / name, tree / "bench" / name)
        return tree

    def profile_local(self, ddb: Any, stream: str, sc: Scenario) -> None:
        tag = "kpl" if sc.kpl else "plain"
        for before in (False, True) if self.args.before else (False,):
            name = f"worker-local-{tag}-{'before' if before else 'after'}"
            env = _worker_env(self.env, stream, sc, self.workdir / "profile.json", {})
            path = self.workdir / "profile.json"
            _run_cli_worker(ddb, env, path, self.args.timeout, self._pyspy(name), self.code(before))
            print(f"  profile: reports/bench/profiles/{name}.txt", flush=True)

    def profile_memory(self, base: dict[str, Any]) -> None:
        for before in (False, True) if self.args.before else (False,):
            name = f"worker-memory-plain-{'before' if before else 'after'}"
            spec = json.dumps({**base, "kind": "worker-memory"})
            cmd = [*self._pyspy(name), "--", sys.executable, "-m", "bench.datapath_trial", spec]
            subprocess.run(
                cmd,
                env=self.env,
                cwd=self.code(before),
                capture_output=True,
                timeout=self.args.timeout,
                check=True,
            )
            print(f"  profile: reports/bench/profiles/{name}.txt", flush=True)


LABELS = {"bare": "bare loop", "worker": "worker", "before": "worker before", "lean": "data path alone"}


def table(results: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    lines = [
        "| scenario | loop | records/s | CPU-s per 100k records | peak RSS (MB) | records/s vs bare | CPU vs bare "
        "| RSS vs bare |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for kind, m in r["loops"].items():
            ratio = r["ratios"][kind]
            label = LABELS[kind] + (f" ({settings['before']})" if kind == "before" else "")
            lines.append(
                f"| {r['scenario']} | {label} | {m['records_per_s']:,.0f} | {m['cpu_s_per_100k']:.3f} | "
                f"{m['peak_rss_mb']:.0f} | {ratio['records_per_s']:.2f}x | {ratio['cpu_s_per_100k']:.2f}x | "
                f"{ratio['peak_rss_mb']:.2f}x |"
            )
    lines.append("")
    lines.append(
        f"Medians of {settings['repeats']} interleaved repeats, each trial its own process, measured from its "
        f"first record to its last. kinesis-local: GetRecords Limit {settings['limit']}, one call per shard at "
        f"most every {settings['idle_time_s']} s for the bare loop and the worker (CONSUMER_IDLE_TIME_SECONDS "
        f"default; the worker before read a backlog without pausing), worker = `python -m consumer run` with "
        f"DynamoDB on moto, auto checkpoints after every batch, CONSUMER_PREFETCH_BATCHES="
        f"{settings['prefetch_batches']}. In-memory: idle time 0, pinned to one core, the bare loop builds the "
        f"same `Record` objects. KPL: {settings['per_aggregate']} user records per aggregate; the bare loop "
        f"de-aggregates with aws-kinesis-agg."
    )
    return "\n".join(lines)


WATCHED = {
    "records built (to_records / _to_record / replace)": (
        "to_records (",
        "_to_record (",
        "to_record (",
        "replace (",
    ),
    "KPL de-aggregation (deaggregate / aws-kinesis-agg)": ("deaggregate (", "iter_deaggregate_records ("),
    "timestamp parsing (botocore parse_timestamp / ours)": ("parse_timestamp (", "utc_timestamp ("),
    "new connections (create_connection)": ("create_connection (",),
    "botocore response parsing": ("ResponseParser.parse (",),
    "thread wake-ups (Condition.notify / Event.set)": ("Condition.notify", "Event.set ("),
}
WAITS = (  # a thread parked on a lock, an event or a socket: not work of this process
    "Condition.wait (",
    "Event.wait (",
    "sleep (",
    "Thread.join (",
    "_wait_for_tstate_lock (",
    "SocketIO.readinto (",
)


def profile_summary(path: Path) -> dict[str, Any]:
    """Shares of the worker's samples (its shard runner's scheduler and pool threads) in what the issue named, and the top
    frames by own time, from a py-spy raw (collapsed stacks) profile."""
    stacks: list[tuple[str, int]] = []
    waiting = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "shard_runner.py" not in stack and "pools.py" not in stack:
            continue
        if stack.rsplit(";", 1)[-1].startswith(WAITS):
            waiting += int(count)
        else:
            stacks.append((stack, int(count)))
    total = sum(c for _, c in stacks) or 1
    shares = {
        name: round(100 * sum(c for s, c in stacks if any(m in s for m in marks)) / total, 1)
        for name, marks in WATCHED.items()
    }
    own: dict[str, int] = {}
    for stack, n in stacks:
        leaf = stack.rsplit(";", 1)[-1].split(" (")[0]
        own[leaf] = own.get(leaf, 0) + n
    top = sorted(own.items(), key=lambda kv: -kv[1])[:8]
    return {
        "samples": total,
        "waiting_samples": waiting,
        "shares_pct": shares,
        "top_own_pct": {k: round(100 * v / total, 1) for k, v in top},
    }


def shard_counts(args: argparse.Namespace, default_out: Path) -> int:
    """``--shard-counts``: run, summarise (``tools.datapath_cpu.shard_summary``), write JSON and markdown."""
    out = args.out.with_name("datapath-shards.json") if args.out == default_out else args.out
    load_before = os.getloadavg()
    out.parent.mkdir(parents=True, exist_ok=True)
    trials: dict[int, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="datapath-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            for n in args.shard_counts:
                print(f"{n} shards: {n * args.records_per_shard:,} records", flush=True)
                trials[n] = bench.run_shards(n)
                partial = json.dumps({str(k): rows for k, rows in trials.items()})  # if a later count fails
                out.with_suffix(".partial.json").write_text(partial)
        finally:
            bench.stop()
    settings = {
        "records_per_shard": args.records_per_shard,
        "record_bytes": len(payload(0)),
        "repeats": args.repeats,
        "rest_s": args.rest,
        "idle_time_s": IDLE,
        "limit": LIMIT,
        "scan_interval_s": LeaseConfig().scan_interval,
        "cpus": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
    }
    summary = shard_summary(trials)
    trials_json = {str(n): rows for n, rows in trials.items()}
    out.write_text(json.dumps({"settings": settings, "summary": summary, "trials": trials_json}, indent=2))
    md = shard_table(summary) + (
        f"\n\n{args.repeats} trials per loop and shard count, interleaved, each a process of its own; "
        f"{args.records_per_shard:,} plain {settings['record_bytes']}-byte records per shard; GetRecords Limit "
        f"{LIMIT}, {IDLE} s apart per shard; at rest: {args.rest} s once caught up; emulator limits on; "
        f"load average {settings['load_avg_before']} before, {settings['load_avg_after']} after.\n"
    )
    out.with_suffix(".md").write_text(md)
    out.with_suffix(".partial.json").unlink(missing_ok=True)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--records", type=int, default=60_000, help="kinesis-local backlog (user records)")
    p.add_argument("--memory-records", type=int, default=400_000, help="in-memory backlog (user records)")
    p.add_argument("--rss-records", type=int, default=48_000, help="16-shard backlog for peak RSS")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cpu", type=int, default=0, help="the core the in-memory trials are pinned to")
    p.add_argument("--only", action="append", help="run only scenarios whose name contains this")
    p.add_argument(
        "--cpu-per-record",
        action="store_true",
        help="only the CPU-per-record comparison: kinesis-local plain and KPL, 5 repeats, datapath-cpu.json",
    )
    p.add_argument("--profile", action="store_true", help="py-spy profiles of the worker")
    p.add_argument("--before", default="", help="also profile this earlier commit's worker (git ref)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument(
        "--idle-after",
        type=float,
        default=0.0,
        help="kinesis-local: seconds each loop keeps running once caught up, to measure its fixed CPU per second "
        "(5 with --cpu-per-record)",
    )
    p.add_argument(
        "--shard-counts",
        type=int,
        nargs="+",
        help="only the cost per shard count: the worker and the bare loop at each count (datapath-shards.json)",
    )
    p.add_argument("--records-per-shard", type=int, default=1000, help="--shard-counts: backlog per shard")
    p.add_argument("--rest", type=float, default=5.0, help="--shard-counts: seconds measured at rest")
    p.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "datapath.json")
    args = p.parse_args(argv)
    if args.shard_counts:
        return shard_counts(args, p.get_default("out"))
    if args.cpu_per_record:
        args.only = ["kinesis-local, plain", "kinesis-local, KPL"]
        if "--repeats" not in (argv if argv is not None else sys.argv):
            args.repeats = 5
        if "--idle-after" not in (argv if argv is not None else sys.argv):
            args.idle_after = 5.0
        if args.out == p.get_default("out"):
            args.out = args.out.with_name("datapath-cpu.json")
    settings = {
        "idle_time_s": IDLE,
        "limit": LIMIT,
        "prefetch_batches": PREFETCH,
        "repeats": args.repeats,
        "per_aggregate": Scenario("", "", 0, 0, False, 0).per_aggregate,
        "cpus": os.cpu_count(),
        "before": args.before,
        "idle_after_s": args.idle_after,
    }
    results = []
    with tempfile.TemporaryDirectory(prefix="datapath-") as tmp:
        bench = Bench(args, Path(tmp))
        try:
            for sc in scenarios(args):
                print(f"{sc.name}: {sc.records:,} records over {sc.shards} shards", flush=True)
                rows = bench.run_local(sc) if sc.backend == "local" else bench.run_memory(sc)
                loops = {kind: _summary(r) for kind, r in rows.items()}
                ratios = {kind: {k: m[k] / loops["bare"][k] for k in m} for kind, m in loops.items()}
                results.append(
                    {
                        "scenario": sc.name,
                        "settings": asdict(sc),
                        "loops": loops,
                        "ratios": ratios,
                        "trials": rows,
                    }
                )
        finally:
            bench.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    profiles_dir = REPO / "reports" / "bench" / "profiles"
    profiles = (
        {p.stem: profile_summary(p) for p in sorted(profiles_dir.glob("*.txt"))} if args.profile else {}
    )
    cpu = cpu_per_record(results)
    args.out.write_text(
        json.dumps(
            {"settings": settings, "cpu_per_record": cpu, "results": results, "profiles": profiles}, indent=2
        )
    )
    md = table(results, settings)
    if cpu:
        md += "\n\nCPU per user record, worker vs bare boto3 loop (target <= 0.3x):\n\n" + cpu_table(cpu)
    for name, summary in profiles.items():
        md += (
            f"\n\nProfile `{name}` ({summary['samples']} working samples of the shard and fetch threads): "
            + ", ".join(f"{k} {v}%" for k, v in summary["shares_pct"].items())
        )
    args.out.with_suffix(".md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
