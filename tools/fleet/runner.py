"""Runs a fleet of ``python -m consumer run`` processes against the emulators while a producer writes."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from consumer.config import LeaseConfig, RetrievalConfig
from consumer.dynamo import create_tables
from tools.fleet.analysis import Delivery

__all__ = ["Fleet", "FleetSettings", "poll"]

REPO = Path(__file__).resolve().parents[2]

# Workers get SIGTERM when the benchmark or demo that started them dies, even by SIGKILL (Linux
# PR_SET_PDEATHSIG, set in the child and kept across exec; no preexec_fn, which is unsafe with threads).
_WORKER_COMMAND = [
    sys.executable,
    "-c",
    "import ctypes, os, sys; ctypes.CDLL('libc.so.6').prctl(1, 15); "
    "os.execv(sys.executable, [sys.executable, '-m', 'consumer', 'run'])",
]

_HASH_KEYS = 2**128  # Kinesis hash keys: 0 .. 2**128 - 1, split evenly between a new stream's shards


def _spread(i: int, n: int) -> int:
    """The hash key of the ``i``-th of ``n`` records of a PutRecords call, the middle of the ``i``-th of ``n``
    slices: each shard gets one a tick, so the wait for its next record (in every hand-off gap) is not random."""
    return (2 * i + 1) * _HASH_KEYS // (2 * n)


def poll(cond: Callable[[], bool], timeout: float, every: float) -> bool:
    """Whether ``cond`` held within ``timeout`` seconds, asked every ``every`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True


@dataclass(frozen=True)
class FleetSettings:
    """The stream's size, the producer's rate and the workers' settings (by default the consumer's)."""

    shards: int = 8
    lease_duration: float = 10.0
    rate: float = 100.0  # records per second, spread over all shards
    scan_interval: float = 1.0
    inbox_poll_interval: float = LeaseConfig().inbox_poll_interval
    idle_time: float = RetrievalConfig().idle_time_between_reads
    metrics_interval: float = 5.0


@dataclass
class Fleet:
    """One isolated scenario: its own stream and tables, its worker processes, its producer (writing ``keys``
    partition keys, rounded up to a multiple of its batch, over and over; None: a key per record)."""

    endpoints: Any  # tools.emulators.AwsEndpoints
    workdir: Path
    settings: FleetSettings
    name: str
    #: Fixed resource names (the demo uses the dev environment's); by default unique ``bench-*`` names.
    stream_name: str | None = None
    lease_table_name: str | None = None
    checkpoint_table_name: str | None = None
    keys: int | None = None
    began: float = field(default_factory=time.time)  # event lines show the seconds since then
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)  # the waits that timed out (``scenarios.wait_for``)
    produced: list[tuple[str, str, float]] = field(default_factory=list)
    #: (shard, sequence number) -> (partition key, data) of every record produced.
    keyed: dict[tuple[str, str], tuple[str, bytes]] = field(default_factory=dict)
    _stop_producer: threading.Event = field(default_factory=threading.Event)
    _producer: threading.Thread | None = None

    def __post_init__(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)  # an earlier run's journals would mix with these
        self.workdir.mkdir(parents=True)
        suffix = uuid.uuid4().hex[:6]
        self.stream = self.stream_name or f"bench-{self.name}-{suffix}"
        self.lease_table = self.lease_table_name or f"bench-leases-{self.name}-{suffix}"
        self.checkpoint_table = self.checkpoint_table_name or f"bench-cps-{self.name}-{suffix}"
        self.kinesis = self.endpoints.client("kinesis")
        self.ddb = self.endpoints.client("dynamodb")
        create_tables(self.ddb, self.lease_table, self.checkpoint_table)
        self.kinesis.create_stream(StreamName=self.stream, ShardCount=self.settings.shards)
        self.wait_active()

    def wait_active(self) -> None:
        """Wait until the stream is ACTIVE (after its creation or a split)."""

        def active() -> bool:
            summary = self.kinesis.describe_stream_summary(StreamName=self.stream)["StreamDescriptionSummary"]
            return bool(summary["StreamStatus"] == "ACTIVE")

        if not poll(active, 60, 0.05):
            raise RuntimeError(f"stream {self.stream} never became ACTIVE")

    def mark(self, label: str) -> float:
        """Record and print a fleet event; returns when it happened."""
        t = time.time()
        self.events.append((t, label))
        print(f"  [{t - self.began:5.1f}s] {label}", flush=True)
        return t

    def start_worker(self, worker_id: str, extra: Mapping[str, str] | None = None) -> None:
        """Start a worker running the journal processor (``extra``: more environment variables)."""
        s = self.settings
        env = {
            **os.environ,
            **self.endpoints.env(),
            "CONSUMER_APPLICATION": "bench",
            "CONSUMER_STREAMS": self.stream,
            "CONSUMER_PROCESSOR": "consumer.examples.journal:JournalProcessor",
            "CONSUMER_LEASE_TABLE": self.lease_table,
            "CONSUMER_CHECKPOINT_TABLE": self.checkpoint_table,
            "CONSUMER_WORKER_ID": worker_id,
            "CONSUMER_LEASE_DURATION_SECONDS": str(s.lease_duration),
            "CONSUMER_SCAN_INTERVAL_SECONDS": str(s.scan_interval),
            "CONSUMER_INBOX_POLL_SECONDS": str(s.inbox_poll_interval),
            "CONSUMER_DISCOVERY_INTERVAL_SECONDS": "2",
            "CONSUMER_IDLE_TIME_SECONDS": str(s.idle_time),
            "CONSUMER_METRICS_INTERVAL_SECONDS": str(s.metrics_interval),
            "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": "20",
            "JOURNAL_PATH": str(self.workdir / f"{worker_id}.journal.jsonl"),
            **(extra or {}),
        }
        log = open(self.workdir / f"{worker_id}.log", "ab")  # noqa: SIM115 - the child holds it
        out = open(self.workdir / f"{worker_id}.stdout.jsonl", "ab")  # noqa: SIM115 - the child holds it
        self.procs[worker_id] = subprocess.Popen(_WORKER_COMMAND, cwd=REPO, env=env, stdout=out, stderr=log)
        self.mark(f"start {worker_id}")

    def signal(self, worker_id: str, sig: signal.Signals) -> float:
        t = self.mark(f"{sig.name} {worker_id}")
        self.procs[worker_id].send_signal(sig)
        return t

    def wait_exit(self, worker_id: str, timeout: float = 30) -> int:
        return self.procs[worker_id].wait(timeout)

    def _item(self, key: str) -> dict[str, Any]:
        got = self.ddb.get_item(
            TableName=self.lease_table, Key={"lease_key": {"S": key}}, ConsistentRead=True
        )
        return dict(got.get("Item", {}))

    def wait_registered(self, worker_id: str, timeout: float = 30) -> None:
        if not poll(lambda: bool(self._item(f"worker#{worker_id}")), timeout, 0.1):
            raise RuntimeError(f"{worker_id} never registered")

    def leader(self) -> str | None:
        """The worker the leadership item names now."""
        owner = self._item("leader").get("owner", {}).get("S")
        return str(owner) if owner is not None else None

    def stop_all(self) -> None:
        """SIGTERM every live worker (resumed first if paused), SIGKILL any still alive after 40 s."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                p.kill()

    def start_producer(self) -> None:
        self._producer = threading.Thread(target=self._produce, daemon=True, name="producer")
        self._producer.start()

    def __enter__(self) -> Fleet:
        """``with fleet:`` the producer runs inside the block; the producer and every worker stop on exit."""
        self.start_producer()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_producer()
        self.stop_all()

    def partition_key(self, n: int, batch: int) -> str:
        """Record ``n``'s key (``batch`` records a call): a key keeps its slot in a call, hence its shard."""
        return f"k{n}" if self.keys is None else f"k{n % (math.ceil(self.keys / batch) * batch)}"

    def produced_records(self) -> list[tuple[str, str, str, bytes]]:
        """(shard, sequence number, partition key, data) of every record the producer wrote."""
        return [(shard, seq, *self.keyed[(shard, seq)]) for shard, seq, _ in self.produced]

    def _produce(self) -> None:
        client = self.endpoints.client("kinesis")
        n = 0
        batch = max(1, int(self.settings.rate / 10))
        next_at = time.monotonic()
        while not self._stop_producer.is_set():
            records = [
                (self.partition_key(n + i, batch), json.dumps({"id": n + i}).encode()) for i in range(batch)
            ]
            entries = [
                {"Data": data, "PartitionKey": key, "ExplicitHashKey": str(_spread(i, batch))}
                for i, (key, data) in enumerate(records)
            ]
            try:
                out = client.put_records(StreamName=self.stream, Records=entries)
            except Exception as exc:  # the emulator is busy: try the same ids again
                print(f"  [{self.name}] producer retry: {exc!r}", flush=True)
                time.sleep(0.2)
                continue
            now = time.time()
            for (key, data), r in zip(records, out["Records"], strict=True):
                if "SequenceNumber" in r:
                    self.produced.append((r["ShardId"], r["SequenceNumber"], now))
                    self.keyed[(r["ShardId"], r["SequenceNumber"])] = (key, data)
            n += batch
            next_at += 0.1
            self._stop_producer.wait(max(0.0, next_at - time.monotonic()))

    def stop_producer(self) -> None:
        """Stop the producer, once."""
        if self._producer is not None and not self._stop_producer.is_set():
            self._stop_producer.set()
            self._producer.join(10)
            self.mark(f"producer stopped after {len(self.produced)} records")

    def lines(self, pattern: str, *needles: str) -> Iterator[dict[str, Any]]:
        """The JSON lines of the files matching ``pattern`` that hold any of ``needles`` (by default all)."""
        for path in sorted(self.workdir.glob(pattern)):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if not needles or any(n in line for n in needles):
                    with contextlib.suppress(ValueError):  # a line cut by SIGKILL, or a worker's traceback
                        yield json.loads(line)

    def journal(self) -> list[dict[str, Any]]:
        return list(self.lines("*.journal.jsonl"))

    def deliveries(self) -> list[Delivery]:
        return [
            Delivery(e["w"], e["s"], e["q"], int(e["e"]), float(e["t"]))
            for e in self.journal()
            if e["k"] == "d"
        ]

    def wait_drained(self, timeout: float = 90) -> bool:
        """Whether every record produced was delivered within ``timeout`` seconds."""
        want = {(s, q) for s, q, _ in self.produced}
        return poll(lambda: want <= {(d.shard, d.sequence) for d in self.deliveries()}, timeout, 0.5)

    def live_workers(self) -> list[str]:
        """The workers still running."""
        return [w for w, p in self.procs.items() if p.poll() is None]

    def lease_holder(self, candidates: list[str]) -> str:
        """The candidate that delivered the most shards last (so holds leases now), else the first."""
        owners = self.last_owners(time.time())
        return max(candidates, key=lambda w: len(owners.get(w, [])))

    def last_owners(self, before: float) -> dict[str, list[str]]:
        """worker -> shards whose last delivery before ``before`` was by that worker."""
        latest = {d.shard: d.worker for d in sorted(self.deliveries(), key=lambda d: d.t) if d.t < before}
        out: dict[str, list[str]] = {}
        for shard, worker in latest.items():
            out.setdefault(worker, []).append(shard)
        return out

    def milestones(self) -> dict[tuple[str, str, int], float]:
        """When each step of every hand-off happened (``analysis.Milestones``), from the logs and journals."""
        out = {("init", e["s"], int(e["e"])): float(e["t"]) for e in self.journal() if e["k"] == "init"}
        names = {"shard_drained": "drained", "lease_handed_over": "handed_over", "lease_received": "received"}
        for e in self.lines("*.log", *(f'"{event}"' for event in names)):
            if e.get("event") in names:
                shard = e.get("shard") or e["lease"].rsplit("#", 1)[-1]
                out[(names[e["event"]], shard, int(e["epoch"]))] = datetime.fromisoformat(e["ts"]).timestamp()
        return out

    def worker_stats(self) -> dict[str, list[dict[str, Any]]]:
        """Every ``worker_stats`` log event, per worker, in order."""
        out: dict[str, list[dict[str, Any]]] = {}
        for e in self.lines("*.log", '"worker_stats"'):
            out.setdefault(e["worker"], []).append(e)
        return out
