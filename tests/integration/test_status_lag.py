"""``status`` costs the fleet nothing: workers on the emulators, behind on a backlog, publish each shard's lag
with their heartbeats, and ``python -m consumer status`` (the CLI, in a process of its own) shows it while its
Kinesis endpoint is a listener that counts connections: zero, for ``--json``, the table and ``--watch``.
And a status of 1,000 shards on DynamoDB is three requests."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError

from consumer.admin.status import fleet_status, scanned_checkpoints
from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.config import ProcessingConfig, RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.dynamo import to_item
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import WorkerItem, lease_key
from consumer.leases.progress import ShardLag, decode_progress
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Position
from consumer.retrieval.kinesis import BotoKinesis
from tools.emulators import client_kwargs

from .support import LEASES, REPO, Names, create_stream, make_names, run_in_thread, wait_until

pytestmark = pytest.mark.integration

SEQ = "49590338271490256608559692538361571095921575989136588898"


class CountingListener:
    """A TCP port that accepts and at once closes every connection, counting them: any Kinesis call made
    against it fails, and is counted."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._sock.close()


class Held(BaseProcessor):
    """Holds the first batch it gets until released: its shard stays behind, the backlog waiting."""

    def __init__(self, release: threading.Event, entered: threading.Semaphore) -> None:
        self.release, self.entered = release, entered

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.entered.release()
        assert self.release.wait(120)


def _worker(worker_id: str, emulators: Any, names: Names, release: threading.Event, entered: Any) -> Worker:
    ddb = emulators.client("dynamodb")
    config = WorkerConfig(
        application="it",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id=worker_id,
        streams=(StreamSpec(names.stream, lambda: Held(release, entered)),),
        lease=LEASES,
        retrieval=RetrievalConfig(idle_time_between_reads=0.05, max_records=10),  # 10 of the backlog a read
        processing=ProcessingConfig(backoff_base=0.01, backoff_max=0.05),
        shutdown=ShutdownConfig(deadline=10.0),
    )
    return Worker(
        config,
        DynamoDBLeaseRepository(ddb, names.lease_table, names.checkpoint_table),
        DynamoDBCheckpointStore(ddb, names.checkpoint_table),
        BotoKinesis(emulators.client("kinesis")),
        metrics=InMemoryMetrics(),
    )


def _status(emulators: Any, names: Names, kinesis_url: str, *args: str) -> str:
    env = {
        **os.environ,
        "COLUMNS": "400",
        **emulators.env(),
        "AWS_ENDPOINT_URL_KINESIS": kinesis_url,  # any Kinesis call would land on the counting listener
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    out = subprocess.run(
        [sys.executable, "-m", "consumer", "status", "--lease-duration", "120", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


@contextmanager
def _listener() -> Iterator[CountingListener]:
    listener = CountingListener()
    try:
        yield listener
    finally:
        listener.close()


def test_status_and_watch_show_the_workers_lag_with_no_kinesis_call(
    emulators, kinesis_client, dynamodb_client, unique_name, boto_session
) -> None:
    names = make_names(unique_name, dynamodb_client)
    shards = create_stream(kinesis_client, names.stream, 2)
    # A backlog, its records arriving over time (one PutRecord each), so that a reader 10 records in is behind.
    for i in range(120):
        kinesis_client.put_record(StreamName=names.stream, Data=b"r%d" % i, PartitionKey=f"pk-{i}")
    release, entered = threading.Event(), threading.Semaphore(0)
    workers = [_worker(w, emulators, names, release, entered) for w in ("w1", "w2")]
    threads = [run_in_thread(w) for w in workers]
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)

    def published() -> dict[tuple[str, str], ShardLag]:
        out: dict[tuple[str, str], ShardLag] = {}
        for w in repo.snapshot().workers:
            out.update(decode_progress(w.progress))
        return out

    try:
        for _ in shards:  # each shard's first batch is held by its owner
            assert entered.acquire(timeout=60)
        wait_until(
            lambda: {k[1] for k in published()} == set(shards),
            timeout=30,
            what="both shards' lag on their owners' items",
        )
        seen = published()
        with _listener() as kinesis:
            # The listener counts a Kinesis call, were one made (here, by a plain client, to show it would).
            probe = boto_session.client("kinesis", **client_kwargs(kinesis.url, retries={"max_attempts": 1}))
            with pytest.raises(BotoCoreError):
                probe.list_streams()  # its connection closed by the listener
            assert kinesis.connections >= 1
            kinesis.connections = 0

            doc = json.loads(_status(emulators, names, kinesis.url, "--json"))
            text = _status(emulators, names, kinesis.url)
            watched = _status(emulators, names, kinesis.url, "--watch", "--count", "2")
            assert kinesis.connections == 0  # not one Kinesis call, in any of the three
        by_shard = {x["shard_id"]: x for x in doc["leases"]}
        for (stream, shard), lag in seen.items():
            x = by_shard[shard]
            assert stream == names.stream
            assert x["lag_note"] is None, x
            assert x["millis_behind_latest"] == lag.millis_behind_latest
            assert x["last_sequence"] == lag.last_sequence is not None
            assert x["lag_age_s"] >= 0 and x["lag_observed_at"].endswith("Z")
        assert any(lag.millis_behind_latest for lag in seen.values())  # the backlog shows
        for lag in seen.values():
            assert lag.millis_behind_latest is not None
            assert str(lag.millis_behind_latest) in text
            assert f"{lag.millis_behind_latest / 1000:.1f}s (" in watched
    finally:
        release.set()
        for w in workers:
            w.request_shutdown()
        for t in threads:
            t.join(30)


def test_a_status_of_1000_shards_is_three_dynamodb_requests(emulators, dynamodb_client, unique_name) -> None:
    names = make_names(unique_name, dynamodb_client)
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    workers = [f"w{i}" for i in range(10)]
    published: dict[str, dict[tuple[str, str], ShardLag]] = {w: {} for w in workers}
    leases, checkpoints = [], []
    for i in range(1000):
        shard, owner = f"shardId-{i:012d}", workers[i % 10]
        key = lease_key("s", shard)
        leases.append(
            {"lease_key": key, "item_type": "lease", "stream": "s", "shard_id": shard, "epoch": 1}
            | {"state": "ACTIVE", "owner": owner, "parents": []}
        )
        position = Position(SEQ, 0)
        checkpoints.append(
            {"lease_key": key, "stream": "s", "shard_id": shard, "epoch": 1, "sequence": SEQ}
            | {"sub_sequence": 0, "position_key": position.sort_key(), "updated_ms": 1}
        )
        published[owner][("s", shard)] = ShardLag(i, SEQ, 100)
    for table, items in ((names.lease_table, leases), (names.checkpoint_table, checkpoints)):
        for start in range(0, len(items), 25):
            batch = [{"PutRequest": {"Item": to_item(x)}} for x in items[start : start + 25]]
            assert not dynamodb_client.batch_write_item(RequestItems={table: batch}).get("UnprocessedItems")
    for w in workers:
        repo.register_worker(WorkerItem(w))
        repo.heartbeat(w, 0, 100, False, progress=published[w])

    calls: Counter[str] = Counter()
    dynamodb_client.meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.update([model.name])
    )
    status = fleet_status(
        repo, scanned_checkpoints(dynamodb_client, names.checkpoint_table), lease_duration=60.0
    )
    assert len(status.leases) == 1000
    assert sorted(x.millis_behind_latest or 0 for x in status.leases) == list(range(1000))
    assert {str(x.checkpoint) for x in status.leases} == {f"{SEQ}/0"}
    # One page of each table (about 200 KB of leases and 50 KB of published progress: under 1 MB) and the
    # leadership item.
    assert dict(calls) == {"Scan": 2, "GetItem": 1}
