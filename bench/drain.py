"""The catch-up benchmark (``make bench-drain``): a worker at its defaults draining a backlog next to the
fastest loop AWS's limits allow, on the in-memory Kinesis behind the emulators' Kinesis limiter (AWS's quotas
on real time; kinesis-local takes seconds per 10,000-record GetRecords and would measure itself). 100-byte and
1 KB records, 4 shards, interleaved trials, medians; JSON in ``reports/bench/drain.json`` (docs/benchmarks.md).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from botocore.exceptions import ClientError

from bench import REPORTS, write_report
from bench.datapath_trial import STREAM, Window, memory_backlog, read_shards, run_worker
from consumer.config import RetrievalConfig
from consumer.errors import ThrottledError
from consumer.retrieval.kinesis import ExpiredIteratorError, GetRecordsResult, ShardInfo
from consumer.retrieval.memory import InMemoryKinesis
from tools.cli import COUNT, Parser
from tools.emulators.kinesis_limiter import EXPIRED, KinesisLimiter, Refusal
from tools.emulators.limits import Limits

__all__ = ["main"]

OUT = REPORTS / "drain.json"
MIB = 1024 * 1024
# The retrieval settings before catch-up pacing: 1,000 records a call, at most 4 calls a second.
BEFORE = RetrievalConfig(max_records=1000, reads_per_second=4.0)


class LimitedKinesis:
    """An in-memory Kinesis whose reads the emulators' Kinesis limiter admits or refuses, as the limits proxy
    does for kinesis-local: the same errors, the same byte counting."""

    def __init__(self, kinesis: InMemoryKinesis) -> None:
        self._k = kinesis
        self.limiter = KinesisLimiter(Limits())

    def list_shards(self, stream: str) -> list[ShardInfo]:
        return self._k.list_shards(stream)

    def get_shard_iterator(self, stream: str, shard_id: str, iterator_type: str, **kwargs: Any) -> str:
        now = time.monotonic()
        if (refusal := self.limiter.check_call("GetShardIterator", stream, shard_id, now)) is not None:
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


def trial(
    kind: str, backlog: InMemoryKinesis, total: int, retrieval: RetrievalConfig | None = None
) -> dict[str, Any]:
    """The fastest legal loop (``loop``: GetRecords ``Limit`` 10,000, 0.2 s after the previous call started or
    once its bytes refilled at 2 MiB/s, a throttled call again 0.2 s later) or the worker at ``retrieval`` (its
    defaults), on a fresh limiter in front of ``backlog``: the window and the throttles met."""
    time.sleep(1.0)  # keeps trials apart
    kinesis, window = LimitedKinesis(backlog), Window(total)
    if kind == "worker":
        metrics = run_worker(kinesis, window, window.done, retrieval or RetrievalConfig())
        return {**window.result, "throttles": int(metrics.total("Throttles.GetRecords"))}

    def read(iterator: str) -> tuple[int, int, str | None]:  # read_shards counts and retries a throttle
        out = kinesis.get_records(iterator, 10_000)
        return len(out.records), sum(len(r["Data"]) for r in out.records), out.next_iterator

    read_shards(kinesis, STREAM, read, 0.2, window, window.done, byte_rate=2 * MIB)
    return window.result


def scenario(size: int, shards: int, per_shard: int, repeats: int) -> dict[str, Any]:
    """Both loops on one backlog, interleaved, and one sample of the worker ``BEFORE`` (it is slow)."""
    backlog, total = memory_backlog(shards, per_shard, size), shards * per_shard
    rows: dict[str, list[dict[str, Any]]] = {"loop": [], "worker": []}
    for kind in (["loop", "worker", "worker", "loop"] * repeats)[: 2 * repeats]:
        rows[kind].append(trial(kind, backlog, total))
        print(f"{size:>5} B {kind:<6} {rows[kind][-1]['records_per_s']:>9.0f} records/s", flush=True)
    before = trial("worker", backlog, total, BEFORE)["records_per_s"]
    print(f"{size:>5} B before {before:>9.0f} records/s (1,000 a call, 4 calls/s)", flush=True)
    loop, worker = (statistics.median(r["records_per_s"] for r in rows[k]) for k in ("loop", "worker"))
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
        "throttles": {k: [r["throttles"] for r in v] for k, v in rows.items()},
        "trials": rows,
        "before_records_per_s": round(before),
        "before_vs_loop": round(before / round(loop), 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run both record sizes, write the JSON report."""
    parser = Parser(prog="python -m bench.drain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=COUNT, default=4)
    parser.add_argument("--small-records", type=COUNT, default=60_000, help="100-byte records per shard")
    parser.add_argument("--kb-records", type=COUNT, default=30_000, help="1 KB records per shard")
    parser.add_argument("--repeats", type=COUNT, default=3)
    args = parser.parse_args(argv)
    sizes = ((100, args.small_records), (1024, args.kb_records))
    scenarios = [scenario(size, args.shards, n, args.repeats) for size, n in sizes]
    report = {"backend": "memory", "limits": "AWS's read quotas (tools.emulators.limits)"}
    write_report(OUT, report | {"scenarios": scenarios})
    for s in scenarios:
        print(
            f"{s['record_bytes']:>5} B x {s['shards']} shards: worker {s['worker_records_per_s']}/s, fastest legal "
            f"loop {s['loop_records_per_s']}/s: {s['worker_vs_loop']}x ({s['samples']} samples each)"
        )
    print(f"-> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
