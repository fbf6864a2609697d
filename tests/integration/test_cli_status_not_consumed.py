"""``python -m consumer status`` (the CLI, in a process of its own, on the emulators' DynamoDB) after a rolling
restart that removed a stream from ``CONSUMER_STREAMS``: the removed stream's lease, released by the last old
worker at its checkpoint, is ``not consumed`` (no alive worker lists it), not ``released``, in ``--json``, the
table and ``--watch``; and no Kinesis call is made for it (the Kinesis endpoint counts connections)."""

from __future__ import annotations

import json
import time

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease, WorkerItem
from consumer.records import Position

from .support import make_names
from .test_status_lag import _listener, _status

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"


def test_status_shows_a_stream_no_alive_worker_lists_as_not_consumed(
    emulators, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    kept, removed, added = (f"{names.stream}-{n}" for n in ("s1", "s3", "s4"))
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    store = DynamoDBCheckpointStore(dynamodb_client, names.checkpoint_table)
    now_ms = int(time.time() * 1000)
    # The old version consumed s1 and s3; it stopped two minutes ago (its item not forgotten yet), after
    # checkpointing s3 and releasing its lease, as a worker does at shutdown.
    repo.register_worker(WorkerItem("w-old", started_ms=now_ms - 120_000, streams=frozenset({kept, removed})))
    for stream in (kept, removed, added):
        repo.create_lease(Lease(stream, SHARD))
    old = repo.take(Lease(removed, SHARD), "w-old", None)
    store.save(removed, SHARD, old.epoch, Position("4242"))
    repo.release(old)
    # The new version consumes s1 and s4.
    for w in ("w5", "w6"):
        repo.register_worker(WorkerItem(w, started_ms=now_ms, streams=frozenset({kept, added})))
        repo.heartbeat(w, 0, 0, False)
    repo.take(Lease(kept, SHARD), "w5", None)

    with _listener() as kinesis:
        doc = json.loads(_status(emulators, names, kinesis.url, "--json"))
        text = _status(emulators, names, kinesis.url)
        watched = _status(emulators, names, kinesis.url, "--watch", "--count", "1")
        assert kinesis.connections == 0  # status reads DynamoDB only

    assert {w["worker_id"]: w["state"] for w in doc["workers"]} == {
        "w-old": "dead",
        "w5": "alive",
        "w6": "alive",
    }
    leases = {x["stream"]: x for x in doc["leases"]}
    assert {s: x["state"] for s, x in leases.items()} == {
        kept: "running",
        removed: "not consumed",
        added: "released",
    }
    assert leases[removed]["owner"] is None and leases[removed]["checkpoint"] == "4242/0"  # kept for later
    assert leases[removed]["lag_note"] == "no owner"
    [row] = [line for line in text.splitlines() if line.startswith(f"{removed} ")]
    assert f"not consumed: no alive worker lists stream {removed}" in row, text
    assert f"not consumed: no alive worker lists stream {removed}" in watched, watched
