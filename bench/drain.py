"""The catch-up benchmark (``make bench-drain``): how fast a worker at its defaults drains a backlog, next to
the fastest loop AWS's limits allow.

The fastest legal loop is one thread per shard: GetRecords with ``Limit`` 10,000, each call started 0.2 s after
the previous one started (5 a second) or, after a big read, once the bytes it returned have refilled at
2 MiB/s from when they came (the limits exactly, no margin); a throttled call is tried again 0.2 s later. The
worker runs with no retrieval setting at all. Both read the same pre-loaded backlog from TRIM_HORIZON, one after
the other (loop, worker, worker, loop, ...), and are timed the same way: from the first shard opened to the
last record. 100-byte and 1 KB records, 4 shards. Medians over the repeats; JSON in ``reports/bench/drain.json``.

The backend is the in-memory Kinesis, each GetRecords and GetShardIterator first put to the emulators' own
Kinesis limiter (``tools.emulators.kinesis_limiter``, AWS's quotas, on real time) exactly as the limits proxy
puts them, the worker on the in-memory lease and checkpoint seams in this process: the backend serves as fast
as AWS allows, so only the limits and the reader pace it. (kinesis-local takes seconds for one 10,000-record
GetRecords here, so a run on it measures the emulator, not the pacing; that variant is gone.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from consumer.config import LeaseConfig, RetrievalConfig, StreamSpec, WorkerConfig
from consumer.errors import ThrottledError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.kinesis import ExpiredIteratorError, GetRecordsResult, ShardInfo
from consumer.retrieval.memory import InMemoryKinesis
from tools.emulators.kinesis_limiter import EXPIRED, KinesisLimiter, Refusal
from tools.emulators.limits import Limits

__all__ = ["main"]

REPO = Path(__file__).resolve().parents[1]
MEMORY_STREAM = "drain"
AWS_CALL_INTERVAL = 0.2  # 5 GetRecords per second per shard
AWS_READ_BYTES = 2 * 1024 * 1024  # per second per shard
AWS_LIMIT = 10_000
MIB = 1024 * 1024


class LimitedKinesis:
    """An in-memory Kinesis whose reads the emulators' Kinesis limiter admits or refuses (AWS's quotas, real
    time), as the limits proxy does for kinesis-local: the same errors, the same byte counting."""

    def __init__(self, kinesis: InMemoryKinesis) -> None:
        self._k = kinesis
        self.limiter = KinesisLimiter(Limits())

    def list_shards(self, stream: str) -> list[ShardInfo]:
        return self._k.list_shards(stream)

    def get_shard_iterator(self, stream: str, shard_id: str, iterator_type: str, **kwargs: Any) -> str:
        now = time.monotonic()
        if (refusal := self.limiter.check_get_shard_iterator(stream, shard_id, now)) is not None:
            raise _refused(refusal, "GetShardIterator")
        iterator = self._k.get_shard_iterator(stream, shard_id, iterator_type, **kwargs)
        self.limiter.iterator_issued(iterator, stream, shard_id, now)
        return iterator

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        key, refusal = self.limiter.check_get_records(iterator, time.monotonic())
        if refusal is not None:
            raise _refused(refusal, "GetRecords")
        out = self._k.get_records(iterator, limit)
        now = time.monotonic()
        if key is not None:
            if out.next_iterator is not None:
                self.limiter.iterator_issued(out.next_iterator, key[0], key[1], now)
            self.limiter.records_read(key, sum(len(r["Data"]) for r in out.records), now)
        return out


def _refused(refusal: Refusal, operation: str) -> Exception:
    cause = ClientError({"Error": {"Code": refusal.code, "Message": refusal.message}}, operation)
    error = ExpiredIteratorError(refusal.message) if refusal.code == EXPIRED else ThrottledError(refusal.code)
    error.__cause__ = cause
    return error


def _memory_backlog(shards: int, per_shard: int, size: int) -> InMemoryKinesis:
    kinesis = InMemoryKinesis()
    kinesis.create_stream(MEMORY_STREAM, shards)
    for s in range(shards):
        shard = f"shardId-{s:012d}"
        for i in range(per_shard):
            kinesis.put(MEMORY_STREAM, shard, _payload(s * per_shard + i, size))
    return kinesis


def memory_loop(kinesis: LimitedKinesis, total: int) -> dict[str, Any]:
    """The fastest legal loop on ``kinesis``; the window and the throttles it met."""
    window = _Window(total)
    throttles = [0]

    def run(shard: str) -> None:
        window.begin()
        iterator: str | None = kinesis.get_shard_iterator(MEMORY_STREAM, shard, "TRIM_HORIZON")
        next_call = 0.0
        while iterator is not None and not window.done.is_set():
            if (wait := next_call - time.monotonic()) > 0:
                time.sleep(wait)
            started = time.monotonic()
            try:
                out = kinesis.get_records(iterator, AWS_LIMIT)
            except ThrottledError:
                throttles[0] += 1
                next_call = started + AWS_CALL_INTERVAL
                continue
            size = sum(len(r["Data"]) for r in out.records)
            next_call = max(started + AWS_CALL_INTERVAL, time.monotonic() + size / AWS_READ_BYTES)
            window.add(len(out.records))
            iterator = out.next_iterator

    threads = [
        threading.Thread(target=run, args=(s.shard_id,), daemon=True)
        for s in kinesis.list_shards(MEMORY_STREAM)
    ]
    for t in threads:
        t.start()
    window.done.wait(600)
    return {**window.result, "throttles": throttles[0]}


# The retrieval settings before catch-up pacing: 1,000 records a call, at most 4 calls a second (0.25 s).
BEFORE = RetrievalConfig(max_records=1000, reads_per_second=4.0)


def memory_worker(
    kinesis: LimitedKinesis, total: int, retrieval: RetrievalConfig | None = None
) -> dict[str, Any]:
    """The worker at its defaults (or ``retrieval``) on ``kinesis`` and the in-memory seams; the window and its
    throttles."""
    window = _Window(total)
    metrics = InMemoryMetrics()

    class Counting(BaseProcessor):
        def initialize(self, data: InitializationInput) -> None:
            window.begin()

        def process_records(self, data: ProcessRecordsInput) -> None:
            window.add(len(data.records))

    tables = InMemoryTables()
    config = WorkerConfig(
        application="drain",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id="drain",
        streams=(StreamSpec(MEMORY_STREAM, Counting),),
        lease=LeaseConfig(scan_interval=0.1),
        retrieval=retrieval or RetrievalConfig(),
    )
    worker = Worker(
        config, InMemoryLeaseRepository(tables), InMemoryCheckpointStore(tables), kinesis, metrics=metrics
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    window.done.wait(600)
    worker.request_shutdown()
    t.join(30)
    return {**window.result, "throttles": int(metrics.total("Throttles.GetRecords"))}


class _Window:
    """Records counted from any thread, timed from the first shard opened to the ``target``-th record."""

    def __init__(self, target: int) -> None:
        self.target, self.count, self._t0 = target, 0, 0.0
        self._lock = threading.Lock()
        self.done = threading.Event()
        self.result: dict[str, Any] = {}

    def begin(self) -> None:
        with self._lock:
            self._t0 = self._t0 or time.perf_counter()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n
            if self.count >= self.target and not self.done.is_set():
                wall = time.perf_counter() - self._t0
                self.result = {"records": self.count, "wall_s": wall, "records_per_s": self.count / wall}
                self.done.set()


def _payload(i: int, size: int) -> bytes:
    body = json.dumps({"id": i, "kind": "order"}).encode()
    return body + b" " * (size - len(body))


def _summary(size: int, shards: int, total: int, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    loop = statistics.median(r["records_per_s"] for r in rows["loop"])
    worker = statistics.median(r["records_per_s"] for r in rows["worker"])
    return {
        "record_bytes": size,
        "shards": shards,
        "records": total,
        "samples": len(rows["loop"]),
        "loop_records_per_s": round(loop),
        "worker_records_per_s": round(worker),
        "worker_vs_loop": round(worker / loop, 3),
        "loop_mib_per_s_per_shard": round(loop * size / shards / MIB, 3),
        "worker_mib_per_s_per_shard": round(worker * size / shards / MIB, 3),
        "throttles": {k: [r.get("throttles", 0) for r in v] for k, v in rows.items()},
        "trials": rows,
    }


def _trials(
    size: int, repeats: int, trial: Callable[[str], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {"loop": [], "worker": []}
    for kind in (["loop", "worker", "worker", "loop"] * repeats)[: 2 * repeats]:
        rows[kind].append(trial(kind))
        print(f"{size:>5} B {kind:<6} {rows[kind][-1]['records_per_s']:>9.0f} records/s", flush=True)
    return rows


def run_memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for size, per_shard in ((100, args.small_records), (1024, args.kb_records)):
        backlog = _memory_backlog(args.shards, per_shard, size)
        total = per_shard * args.shards

        def trial(kind: str, backlog: InMemoryKinesis = backlog, total: int = total) -> dict[str, Any]:
            time.sleep(1.0)  # a fresh limiter per trial; the pause keeps trials apart
            limited = LimitedKinesis(backlog)
            return memory_loop(limited, total) if kind == "loop" else memory_worker(limited, total)

        summary = _summary(size, args.shards, total, _trials(size, args.repeats, trial))
        time.sleep(1.0)
        before = memory_worker(LimitedKinesis(backlog), total, BEFORE)  # one sample: it is slow
        summary["before_records_per_s"] = round(before["records_per_s"])
        summary["before_vs_loop"] = round(before["records_per_s"] / summary["loop_records_per_s"], 3)
        print(
            f"{size:>5} B before {before['records_per_s']:>9.0f} records/s (1,000 a call, 4 calls/s)",
            flush=True,
        )
        results.append(summary)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--small-records", type=int, default=60_000, help="100-byte records per shard")
    parser.add_argument("--kb-records", type=int, default=30_000, help="1 KB records per shard")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "bench" / "drain.json")
    args = parser.parse_args(argv)
    scenarios = run_memory(args)
    report = {
        "backend": "memory",
        "limits": "AWS's read quotas (tools.emulators.limits)",
        "scenarios": scenarios,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    for s in scenarios:
        print(
            f"{s['record_bytes']:>5} B x {s['shards']} shards: worker {s['worker_records_per_s']}/s, "
            f"fastest legal loop {s['loop_records_per_s']}/s: {s['worker_vs_loop']}x ({s['samples']} samples each)"
        )
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
