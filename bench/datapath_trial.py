"""One data-path trial in a process of its own (so that CPU time and peak RSS are its own):
``python -m bench.datapath_trial '<json spec>'`` prints one JSON line.

Kinds: ``bare`` (a hand-written GetRecords loop, one thread per shard, paced like the worker) on
kinesis-local or on the in-memory Kinesis, ``lean`` (the same loop on the worker's data path: its client,
``BotoKinesis`` and ``to_records``) on kinesis-local, and ``worker`` on the in-memory seams (the kinesis-local worker is
``python -m consumer run`` itself, started by ``bench.datapath``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from base64 import b64decode
from collections.abc import Callable
from typing import Any

from aws_kinesis_agg.aggregator import AggRecord
from aws_kinesis_agg.deaggregator import iter_deaggregate_records

from bench.datapath_processor import WINDOW, CountingProcessor
from consumer.config import LeaseConfig, RetrievalConfig, StreamSpec, WorkerConfig
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.retrieval.memory import InMemoryKinesis

__all__ = ["aggregate", "main", "payload"]

STREAM = "datapath"


def payload(i: int) -> bytes:
    """A 100-byte JSON record."""
    body = json.dumps({"id": i, "kind": "order", "amount": i % 997}).encode()
    return body + b" " * (100 - len(body))


def aggregate(first: int, count: int) -> bytes:
    """``count`` user records in one KPL aggregate (aws-kinesis-agg)."""
    agg = AggRecord()
    for i in range(first, first + count):
        agg.add_user_record(f"pk-{i}", payload(i))
    _pk, _ehk, data = agg.get_contents()
    return bytes(data)


def _count_user_records(records: list[dict[str, Any]], kpl: bool) -> int:
    """Plain records are usable as botocore returns them; aggregates are split by aws-kinesis-agg, whose
    sub-records carry base64 text that a user decodes to get the payload."""
    if not kpl:
        return len(records)
    return len(
        [b64decode(u["kinesis"]["data"]) for u in iter_deaggregate_records(records, data_format="Boto3")]
    )


def _pace(next_call: float) -> None:
    wait = next_call - time.monotonic()
    if wait > 0:
        time.sleep(wait)


def bare_kinesis_local(spec: dict[str, Any]) -> None:
    """What a user writes with plain boto3: one thread per shard, GetRecords paced at the idle time."""
    import boto3
    from botocore.config import Config

    # Endpoint from AWS_ENDPOINT_URL_KINESIS; a connection per thread (boto3's default pool holds 10).
    pool = Config(max_pool_connections=max(10, int(spec.get("shards", 0))))
    client = boto3.session.Session().client("kinesis", config=pool)

    def read(iterator: str) -> tuple[int, str | None]:
        out = client.get_records(ShardIterator=iterator, Limit=spec["limit"])
        return _count_user_records(out["Records"], spec["kpl"]), out.get("NextShardIterator")

    _paced_loop(spec, client, read)


def lean_kinesis_local(spec: dict[str, Any]) -> None:
    """The worker's data path alone, in the bare loop's place: the consumer's Kinesis client (lean GetRecords
    parser), ``BotoKinesis.get_records`` and ``to_records`` (the ``Record``s the worker delivers, KPL split)."""
    from consumer.aws import make_client
    from consumer.retrieval.kinesis import BotoKinesis, to_records

    client = make_client("kinesis")
    api = BotoKinesis(client)

    def read(iterator: str) -> tuple[int, str | None]:
        out = api.get_records(iterator, spec["limit"])
        return len(to_records(spec["stream"], "shard", out.records)), out.next_iterator

    _paced_loop(spec, client, read)


def _paced_loop(spec: dict[str, Any], client: Any, read: Callable[[str], tuple[int, str | None]]) -> None:
    """One thread per shard from TRIM_HORIZON, one ``read`` per idle time; with ``idle_after`` the threads
    keep polling the drained shards, as a worker does, while the fixed CPU per second is measured."""
    page = client.list_shards(StreamName=spec["stream"])
    shards = [s["ShardId"] for s in page["Shards"]]
    while page.get("NextToken"):  # kinesis-local answers 100 at a time
        page = client.list_shards(NextToken=page["NextToken"])
        shards += [s["ShardId"] for s in page["Shards"]]
    idle_after = float(spec.get("idle_after", 0))

    def run(shard: str) -> None:
        WINDOW.begin()
        it = client.get_shard_iterator(
            StreamName=spec["stream"], ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )
        iterator: str | None = it["ShardIterator"]
        next_call = 0.0
        while iterator and not (_STOP if idle_after else WINDOW.done).is_set():
            _pace(next_call)
            next_call = time.monotonic() + spec["idle"]
            count, iterator = read(iterator)
            WINDOW.add(count)

    _threads(shards, run, idle_after)


def _memory_kinesis(spec: dict[str, Any]) -> InMemoryKinesis:
    kinesis = InMemoryKinesis()
    kinesis.create_stream(STREAM, spec["shards"])
    shards = [f"shardId-{i:012d}" for i in range(spec["shards"])]
    per = spec["records"] // spec["shards"]
    for s, shard in enumerate(shards):
        if spec["kpl"]:
            agg = spec["per_aggregate"]
            for first in range(0, per, agg):
                kinesis.put(STREAM, shard, aggregate(s * per + first, agg))
        else:
            for i in range(per):
                kinesis.put(STREAM, shard, payload(s * per + i))
    return kinesis


def bare_memory(spec: dict[str, Any]) -> None:
    """The same loop on the in-memory Kinesis, building the same ``Record`` objects the worker delivers."""
    kinesis = _memory_kinesis(spec)
    shards = [s.shard_id for s in kinesis.list_shards(STREAM)]
    kpl = spec["kpl"]

    def run(shard: str) -> None:
        WINDOW.begin()
        iterator: str | None = kinesis.get_shard_iterator(STREAM, shard, "TRIM_HORIZON")
        next_call = 0.0
        while iterator is not None and not WINDOW.done.is_set():
            _pace(next_call)
            next_call = time.monotonic() + spec["idle"]
            out = kinesis.get_records(iterator, spec["limit"])
            if kpl:
                records = [
                    Record(
                        STREAM,
                        shard,
                        k["sequenceNumber"],
                        k["subSequenceNumber"],
                        k["partitionKey"],
                        b64decode(k["data"]),
                        k["approximateArrivalTimestamp"],
                        True,
                    )
                    for u in iter_deaggregate_records(list(out.records), data_format="Boto3")
                    for k in (u["kinesis"],)
                ]
            else:
                records = [
                    Record(
                        STREAM,
                        shard,
                        w["SequenceNumber"],
                        0,
                        w["PartitionKey"],
                        w["Data"],
                        w["ApproximateArrivalTimestamp"],
                    )
                    for w in out.records
                ]
            WINDOW.add(len(records))
            iterator = out.next_iterator

    _threads(shards, run)


def worker_memory(spec: dict[str, Any]) -> None:
    """The worker on the in-memory seams (leases, checkpoints, Kinesis), auto checkpoints."""
    kinesis = _memory_kinesis(spec)
    tables = InMemoryTables()
    config = WorkerConfig(
        application="datapath",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id="w1",
        streams=(StreamSpec(STREAM, CountingProcessor),),
        lease=LeaseConfig(scan_interval=0.1),
        retrieval=RetrievalConfig(idle_time_between_reads=spec["idle"], max_records=spec["limit"]),
    )
    worker = Worker(
        config,
        InMemoryLeaseRepository(tables),
        InMemoryCheckpointStore(tables),
        kinesis,
        metrics=InMemoryMetrics(),
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    WINDOW.done.wait(600)
    worker.request_shutdown()
    t.join(30)


_STOP = threading.Event()


def _threads(shards: list[str], run: Callable[[str], None], idle_after: float = 0.0) -> None:
    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in shards]
    for t in threads:
        t.start()
    WINDOW.done.wait(600)
    if idle_after < 0:  # until SIGTERM (``until_term``): the parent measures the rest and the exit
        while not _STOP.wait(0.5):
            pass
    elif idle_after and WINDOW.done.is_set():  # CPU per second with nothing left to read (fixed cost)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(idle_after)
        WINDOW.result["idle_cpu_ms_per_s"] = (
            (time.process_time() - cpu0) / (time.perf_counter() - wall0) * 1e3
        )
    _STOP.set()
    for t in threads:
        t.join(10)


KINDS: dict[str, Callable[[dict[str, Any]], None]] = {
    "bare-local": bare_kinesis_local,
    "lean-local": lean_kinesis_local,
    "bare-memory": bare_memory,
    "worker-memory": worker_memory,
}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    if spec.get("cpu") is not None:
        os.sched_setaffinity(0, {int(spec["cpu"])})  # the in-memory figures are for one core
    WINDOW.target = spec["records"]
    if spec.get("until_term"):  # the threads keep polling once caught up, until SIGTERM
        spec["idle_after"] = -1
        signal.signal(signal.SIGTERM, lambda _sig, _frame: _STOP.set())
    KINDS[spec["kind"]](spec)
    if not WINDOW.done.is_set():
        print(json.dumps({"error": f"only {WINDOW.count} of {spec['records']} records"}), flush=True)
        return 1
    print(json.dumps(WINDOW.result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
