"""One data-path trial in a process of its own (its CPU time and peak RSS its own): ``python -m
bench.datapath_trial '<json spec>'`` writes its ``Window`` (first read to last record: wall time, CPU of the
whole process, peak RSS) to ``DATAPATH_RESULT`` and polls until SIGTERM. ``bare`` (plain boto3, or building the
worker's ``Record``s in memory), ``lean`` (the worker's client, ``BotoKinesis`` and ``to_records``) or the
in-memory ``worker``; ``python -m consumer run`` counts with ``CountingProcessor``. With ``DATAPATH_CALLS`` set,
every AWS call the process makes is counted (``count_calls``). ``bench.drain`` and ``bench.multilang`` share
its parts."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from base64 import b64decode
from collections import Counter
from collections.abc import Callable
from functools import partial
from operator import itemgetter
from pathlib import Path
from typing import Any

import boto3
from aws_kinesis_agg.aggregator import AggRecord
from aws_kinesis_agg.deaggregator import iter_deaggregate_records
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import ClientError

from consumer.aws import make_client
from consumer.config import LeaseConfig, RetrievalConfig, StreamSpec, WorkerConfig
from consumer.errors import ThrottledError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.retrieval.kinesis import BotoKinesis, to_records
from consumer.retrieval.memory import InMemoryKinesis
from tools.emulators.kinesis_limiter import THROUGHPUT
from tools.emulators.limits import Limits

__all__ = ["STREAM", "WINDOW", "CountingProcessor", "Window", "count_calls", "local_backlog", "main"]
__all__ += ["memory_backlog", "payload", "peak_rss_mb", "read_shards", "run_worker"]

STREAM = "datapath"
PLAIN = itemgetter("SequenceNumber", "PartitionKey", "Data", "ApproximateArrivalTimestamp")
SUB = itemgetter("sequenceNumber", "subSequenceNumber", "partitionKey", "data", "approximateArrivalTimestamp")
Read = Callable[[str], tuple[int, int, str | None]]  # iterator -> (records, bytes, next iterator)


class Window:
    """Counts records from any thread, from the first read to the ``target``-th record; then ``result`` is set
    (and written to ``result_path``, if any) and ``done``."""

    def __init__(self, target: int, result_path: str = "") -> None:
        self.target, self.result_path, self.count = target, result_path, 0
        self.throttles = 0  # reads refused for the shard's rate (read_shards)
        self._lock = threading.Lock()
        self._wall0 = self._cpu0 = 0.0
        self.done = threading.Event()
        self.result: dict[str, Any] = {}

    def begin(self) -> None:
        """The first shard is about to be read (idempotent): the window opens here."""
        with self._lock:
            if not self._wall0:
                self._wall0, self._cpu0 = time.perf_counter(), time.process_time()

    def throttled(self) -> None:
        """A read was refused for the shard's rate (``throttles`` in the result)."""
        with self._lock:
            self.throttles += 1

    def add(self, n: int) -> None:
        """``n`` more records were read."""
        if n <= 0:
            return
        self.begin()
        with self._lock:
            self.count += n
            if self.count < self.target or self.done.is_set():
                return
            wall, cpu = time.perf_counter() - self._wall0, time.process_time() - self._cpu0
            self.result = {
                "records": self.count,
                "wall_s": wall,
                "cpu_s": cpu,
                "records_per_s": self.count / wall,
                "cpu_s_per_100k": cpu / self.count * 100_000,
                "peak_rss_mb": peak_rss_mb(),
                "throttles": self.throttles,
                "start_cpu_s": self._cpu0,  # the process's CPU before its first read: start-up
            }
            self.done.set()
        if self.result_path:
            Path(self.result_path).write_text(json.dumps(self.result))


def peak_rss_mb() -> float:
    """This process's peak resident set (``VmHWM``) in MB; not ``ru_maxrss``, which Linux carries over ``exec``
    from the parent, so that a trial would report the benchmark process's peak when that was larger."""
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmHWM:", 1)[1].split()[0]) / 1024


WINDOW = Window(int(os.environ.get("DATAPATH_TARGET") or 0), os.environ.get("DATAPATH_RESULT", ""))


class CountingProcessor(BaseProcessor):
    """Counts each batch into ``window``, which opens when the first shard is initialized."""

    def __init__(self, window: Window = WINDOW) -> None:
        self.window = window

    def initialize(self, data: InitializationInput) -> None:
        self.window.begin()

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.window.add(len(data.records))


def count_calls(path: str) -> None:
    """Count every botocore API call of this process by operation; the counts and the monotonic time go to
    ``path`` (replaced whole) at most every 0.2 s, on the calling thread."""
    original = BaseClient._make_api_call
    lock = threading.Lock()
    counts: Counter[str] = Counter()
    written = [0.0]

    def counted(self: Any, operation_name: str, api_params: Any) -> Any:
        with lock:
            counts[operation_name] += 1
            now = time.monotonic()
            if due := now - written[0] >= 0.2:
                written[0] = now
                snapshot = json.dumps({"calls": counts, "at": now})
        if due:
            tmp = Path(f"{path}.{threading.get_ident()}")
            tmp.write_text(snapshot)
            os.replace(tmp, path)
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counted


if os.environ.get("DATAPATH_CALLS"):
    count_calls(os.environ["DATAPATH_CALLS"])


def payload(i: int, size: int = 100) -> bytes:
    """A JSON record of ``size`` bytes."""
    body = json.dumps({"id": i, "kind": "order", "amount": i % 997}).encode()
    return body + b" " * (size - len(body))


def _blobs(first: int, count: int, size: int = 100, per_aggregate: int = 0) -> list[bytes]:
    """User records ``first`` to ``first + count``: ``size``-byte payloads, or KPL aggregates of ``per_aggregate``
    (aws-kinesis-agg)."""
    if not per_aggregate:
        return [payload(i, size) for i in range(first, first + count)]
    out = []
    for start in range(first, first + count, per_aggregate):
        agg = AggRecord()
        for i in range(start, start + per_aggregate):
            agg.add_user_record(f"pk-{i}", payload(i))
        out.append(bytes(agg.get_contents()[2]))
    return out


def memory_backlog(shards: int, per_shard: int, size: int = 100, per_aggregate: int = 0) -> InMemoryKinesis:
    """An in-memory ``STREAM`` of ``shards`` shards of ``per_shard`` user records each (``_blobs``)."""
    kinesis = InMemoryKinesis()
    kinesis.create_stream(STREAM, shards)
    for s in range(shards):
        for blob in _blobs(s * per_shard, per_shard, size, per_aggregate):
            kinesis.put(STREAM, f"shardId-{s:012d}", blob)
    return kinesis


def local_backlog(kinesis: Any, shards: int, count: int, size: int = 100, per_aggregate: int = 0) -> str:
    """A new stream of ``shards`` shards holding ``_blobs(0, count, ...)``, put 500 a request; its name."""
    stream = f"dp-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.2})
    began = time.monotonic()
    data = _blobs(0, count, size, per_aggregate)
    entries = [{"Data": blob, "PartitionKey": f"pk-{i}"} for i, blob in enumerate(data)]
    for i in range(0, len(entries), 500):
        chunk = entries[i : i + 500]
        while chunk:
            out = kinesis.put_records(StreamName=stream, Records=chunk)
            chunk = [e for e, r in zip(chunk, out["Records"], strict=True) if "ErrorCode" in r]
    print(f"  backlog of {count:,} records put in {time.monotonic() - began:.0f}s", flush=True)
    return stream


def read_shards(
    kinesis: Any,
    stream: str,
    read: Read,
    interval: float,
    window: Window,
    until: threading.Event,
    byte_rate: float = math.inf,
) -> None:
    """One thread per shard of ``stream`` on the ``kinesis`` seam, from TRIM_HORIZON until ``until``: a ``read``
    at most every ``interval`` from the previous one's start and, after n bytes, once they refilled at ``byte_rate``."""

    def run(shard: str) -> None:
        window.begin()
        iterator: str | None = kinesis.get_shard_iterator(stream, shard, "TRIM_HORIZON")
        next_call = 0.0
        while iterator and not until.is_set():
            if (wait := next_call - time.monotonic()) > 0:
                time.sleep(wait)
            started = time.monotonic()
            try:
                count, size, iterator = read(iterator)
            except (ThrottledError, ClientError) as exc:
                if isinstance(exc, ClientError) and exc.response["Error"]["Code"] != THROUGHPUT:
                    raise
                window.throttled()  # the same iterator again at the next turn, as AWS asks
                count, size = 0, 0
            next_call = max(started + interval, time.monotonic() + size / byte_rate)
            window.add(count)

    shards = [s.shard_id for s in kinesis.list_shards(stream)]
    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in shards]
    for t in threads:
        t.start()
    until.wait(600)
    for t in threads:
        t.join(10)


def run_worker(
    kinesis: Any, window: Window, until: threading.Event, retrieval: RetrievalConfig
) -> InMemoryMetrics:
    """The worker on ``kinesis`` and the in-memory lease and checkpoint seams (auto checkpoints), counting into
    ``window`` until ``until``; its metrics."""
    tables, metrics = InMemoryTables(), InMemoryMetrics()
    spec, lease = StreamSpec(STREAM, partial(CountingProcessor, window)), LeaseConfig(scan_interval=0.1)
    config = WorkerConfig("datapath", "leases", "checkpoints", (spec,), "w1", lease, retrieval)
    repository, checkpoints = InMemoryLeaseRepository(tables), InMemoryCheckpointStore(tables)
    worker = Worker(config, repository, checkpoints, kinesis, metrics=metrics)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    until.wait(600)
    worker.request_shutdown()
    t.join(30)
    return metrics


_STOP = threading.Event()


def _local(spec: dict[str, Any], lean: bool) -> None:
    # Endpoint from AWS_ENDPOINT_URL_KINESIS; bare: a connection per thread (boto3's default pool holds 10).
    pool = Config(max_pool_connections=max(10, spec["shards"]))
    client = make_client("kinesis") if lean else boto3.session.Session().client("kinesis", config=pool)
    api = BotoKinesis(client)

    def bare(iterator: str) -> tuple[int, int, str | None]:
        out = client.get_records(ShardIterator=iterator, Limit=spec["limit"])
        size = sum(len(r["Data"]) for r in out["Records"])
        if spec["kpl"]:  # users split aggregates with aws-kinesis-agg and decode its base64 sub-records
            users = iter_deaggregate_records(out["Records"], data_format="Boto3")
            return len([b64decode(u["kinesis"]["data"]) for u in users]), size, out.get("NextShardIterator")
        return len(out["Records"]), size, out.get("NextShardIterator")

    def lean_read(iterator: str) -> tuple[int, int, str | None]:
        out = api.get_records(iterator, spec["limit"])
        size = sum(len(r["Data"]) for r in out.records)
        return len(to_records(spec["stream"], "shard", out.records)), size, out.next_iterator

    # Both within AWS's 2 MiB read a second per shard, as the worker paces itself (else a read of up to
    # 10,000 records four times a second is refused, and botocore's retries would count as the loop's CPU).
    byte_rate = Limits().get_records_bytes_per_shard or math.inf
    read_shards(api, spec["stream"], lean_read if lean else bare, spec["idle"], WINDOW, _STOP, byte_rate)


def _memory(spec: dict[str, Any], worker: bool) -> None:
    per_aggregate = spec["per_aggregate"] if spec["kpl"] else 0
    kinesis = memory_backlog(spec["shards"], spec["records"] // spec["shards"], per_aggregate=per_aggregate)
    if worker:
        run_worker(
            kinesis, WINDOW, _STOP, RetrievalConfig(idle_time_between_reads=0.0, max_records=spec["limit"])
        )
        return

    def read(iterator: str) -> tuple[int, int, str | None]:  # the same ``Record``s the worker delivers
        out = kinesis.get_records(iterator, spec["limit"])
        if spec["kpl"]:
            subs = (
                SUB(u["kinesis"]) for u in iter_deaggregate_records(list(out.records), data_format="Boto3")
            )
            records = [Record(STREAM, "shard", s, n, k, b64decode(d), t, True) for s, n, k, d, t in subs]
        else:
            records = [Record(STREAM, "shard", s, 0, k, d, t) for s, k, d, t in map(PLAIN, out.records)]
        return len(records), 0, out.next_iterator

    read_shards(kinesis, STREAM, read, 0.0, WINDOW, _STOP)


def main(argv: list[str]) -> int:
    """Run the trial ``argv[0]`` describes until SIGTERM; 1 if it did not read the whole backlog."""
    spec = json.loads(argv[0])
    signal.signal(signal.SIGTERM, lambda *_: _STOP.set())
    if spec["backend"] == "local":
        _local(spec, lean=spec["kind"] == "lean")
    else:
        os.sched_setaffinity(0, {0})  # the in-memory figures are for one core
        _memory(spec, worker=spec["kind"] == "worker")
    return 0 if WINDOW.done.is_set() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
