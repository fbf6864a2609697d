"""The consumer's raw sink and the compaction job together: a worker killed between its S3 write and its
checkpoint leaves duplicates in raw (the next owner re-reads those records and writes them under other bounds),
and compaction removes them. Kinesis, DynamoDB and S3 are the emulators, over HTTP."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import RetrievalConfig, StreamSpec, WorkerConfig
from consumer.errors import UnreachableError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Position
from consumer.retrieval.kinesis import BotoKinesis
from consumer.sinks.raw_s3 import RawS3Sink
from spark_jobs import compact
from tests.integration.support import (
    LEASES,
    create_stream,
    dynamo_worker,
    make_names,
    put_records,
    run_in_thread,
)
from tests.unit.helpers import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration]


class KilledBeforeCheckpoint:
    """The checkpoint store of a worker that dies right after its first S3 write: no checkpoint lands."""

    def __init__(self, inner: DynamoDBCheckpointStore) -> None:
        self.inner = inner
        self.died = threading.Event()

    def get(self, stream: str, shard_id: str):
        return self.inner.get(stream, shard_id)

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        self.died.set()
        raise UnreachableError("worker killed before the checkpoint landed")  # as the real store says it


class Unreachable:
    """The dead worker's lease repository: once ``dead`` is set, nothing gets through (no more heartbeats)."""

    def __init__(self, inner: DynamoDBLeaseRepository, dead: threading.Event) -> None:
        self.inner, self.dead = inner, dead

    def __getattr__(self, name: str):
        attr = getattr(self.inner, name)

        def call(*args, **kwargs):
            if self.dead.is_set():
                raise UnreachableError("worker is dead")  # what the real repository raises with no network
            return attr(*args, **kwargs)

        return call


def _download(s3, bucket: str, root: Path) -> list[str]:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    for key in keys:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return keys


def test_killed_between_write_and_checkpoint_duplicates_in_raw_and_compaction_removes_them(
    spark, emulators, kinesis_client, dynamodb_client, s3_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    produced = [
        r["SequenceNumber"]
        for r in put_records(kinesis_client, names.stream, [f'{{"n": {i}}}'.encode() for i in range(40)])
    ]
    s3 = emulators.client("s3")
    ddb = emulators.client("dynamodb")
    store = KilledBeforeCheckpoint(DynamoDBCheckpointStore(ddb, names.checkpoint_table))
    doomed = Worker(
        WorkerConfig(
            application="it",
            lease_table=names.lease_table,
            checkpoint_table=names.checkpoint_table,
            worker_id="doomed",
            lease=LEASES,
            streams=(StreamSpec(names.stream, lambda: RawS3Sink(client=s3, bucket=bucket, max_records=10)),),
            retrieval=RetrievalConfig(idle_time_between_reads=0.05),
        ),
        Unreachable(DynamoDBLeaseRepository(ddb, names.lease_table, names.checkpoint_table), store.died),  # type: ignore[arg-type]
        store,
        BotoKinesis(emulators.client("kinesis")),
        metrics=InMemoryMetrics(),
    )
    t_doomed = run_in_thread(doomed)
    wait_until(store.died.is_set, what="the first S3 write")
    first_objects = [o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert first_objects  # written, never checkpointed
    successor = dynamo_worker(
        "successor", emulators, names, lambda: RawS3Sink(client=s3, bucket=bucket, max_records=7, max_age=0.5)
    )
    t_successor = run_in_thread(successor)
    try:
        checkpoints = DynamoDBCheckpointStore(ddb, names.checkpoint_table)

        def all_checkpointed() -> bool:
            item = checkpoints.get(names.stream, "shardId-000000000000")
            return item is not None and item.position == Position(produced[-1])

        wait_until(all_checkpointed, timeout=40, what="the successor checkpointed everything")
    finally:
        successor.request_shutdown()
        t_successor.join(20)
        doomed.request_shutdown()
        t_doomed.join(20)
    raw_root = tmp_path / "lake"
    keys = _download(s3_client, bucket, raw_root)
    lines = [
        json.loads(line)
        for key in keys
        for line in gzip.decompress((raw_root / key).read_bytes()).splitlines()
    ]
    seqs = [ln["sequence_number"] for ln in lines]
    assert len(seqs) > len(set(seqs)), "expected duplicates in raw after the kill"
    assert set(seqs) == set(produced)
    hours = sorted({(k.split("date=")[1][:10], k.split("hour=")[1][:2]) for k in keys})
    start, end = f"{hours[0][0]}T{hours[0][1]}", f"{hours[-1][0]}T{hours[-1][1]}"
    options = compact.parse_args(
        [
            "--input",
            str(raw_root / "raw"),
            "--output",
            str(tmp_path / "curated"),
            "--quarantine",
            str(tmp_path / "quarantine"),
            "--start",
            start,
            "--end",
            end,
        ]
    )
    counts = compact.run(spark, options)
    curated = spark.read.parquet(str(tmp_path / "curated")).select("sequence_number").collect()
    curated_seqs = [r.sequence_number for r in curated]
    assert sorted(curated_seqs) == sorted(produced)  # every record exactly once
    assert counts["duplicates"] == len(seqs) - len(set(seqs)) > 0
