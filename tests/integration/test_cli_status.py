"""``status`` tells the truth: a fleet with a dead worker, a halted shard, a hand-off in progress, a released
and an ended shard, read by the real CLI (``--json``, the table, and ``--watch``); each shard's lag is what its
owner published with its heartbeat (tests/integration/test_status_lag.py: and no Kinesis call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import ShardLag
from consumer.records import Position

from .support import REPO, create_stream, make_names, put_records

pytestmark = pytest.mark.integration


def _cli(emulators, names, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "COLUMNS": "400",  # the terminal width rich lays the live view out for
        **emulators.env(),
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    out = subprocess.run(
        [sys.executable, "-m", "consumer", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in out.stderr, out.stderr
    assert out.returncode == 0, out.stderr
    return out


def test_status_shows_dead_workers_halted_shards_and_hand_offs(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    running, halted, handing, orphaned, released, ended = create_stream(kinesis_client, names.stream, 6)
    put = put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(60)])
    first = {}
    for r in put:
        first.setdefault(r["ShardId"], r["SequenceNumber"])
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    store = DynamoDBCheckpointStore(dynamodb_client, names.checkpoint_table)
    now_ms = int(time.time() * 1000)
    repo.register_worker(WorkerItem("w-alive", started_ms=now_ms))
    # It read the running shard 0.2 s before this heartbeat: 1.5 s behind, at the shard's first record.
    repo.heartbeat(
        "w-alive", 0, 3, False, progress={(names.stream, running): ShardLag(1500, first[running], 200)}
    )
    repo.register_worker(WorkerItem("w-next", started_ms=now_ms))
    repo.heartbeat("w-next", 0, 0, False)
    repo.register_worker(WorkerItem("w-dead", started_ms=now_ms - 120_000))  # silent for two minutes
    leases = {s: Lease(names.stream, s) for s in (running, halted, handing, orphaned, released, ended)}
    for lease in leases.values():
        repo.create_lease(lease)
    owned = {s: repo.take(leases[s], "w-alive", None) for s in (running, halted, handing, ended)}
    owned[orphaned] = repo.take(leases[orphaned], "w-dead", None)
    store.save(names.stream, running, owned[running].epoch, Position(first[running]))
    repo.mark_halted(owned[halted], "4242/0", now_ms - 30_000)
    repo.request_handoff(owned[handing], "w-next", now_ms)
    repo.mark_ended(owned[ended])

    doc = json.loads(_cli(emulators, names, "status", "--json", "--lease-duration", "10").stdout)
    shards = {x["shard_id"]: x for x in doc["leases"]}
    assert {s: x["state"] for s, x in shards.items()} == {
        running: "running",
        halted: "halted",
        handing: "handing over",
        orphaned: "owner dead",
        released: "released",
        ended: "ended",
    }
    assert shards[halted]["halted_at"] == "4242/0" and shards[halted]["halted_since"].endswith("Z")
    assert shards[handing]["handoff_to"] == "w-next"
    assert shards[orphaned]["owner"] == "w-dead" and shards[orphaned]["owner_state"] == "dead"
    assert shards[released]["owner"] is None
    assert shards[running]["checkpoint"] == f"{first[running]}/0"
    assert shards[running]["millis_behind_latest"] == 1500 and shards[running]["lag_note"] is None
    assert shards[running]["last_sequence"] == first[running] and 0 <= shards[running]["lag_age_s"] < 10
    assert shards[halted]["lag_note"] == "halted: not read until an operator acts"
    assert shards[orphaned]["lag_note"] == "not published by its owner yet"  # it never beat at all
    assert shards[released]["lag_note"] == "no owner" and shards[ended]["millis_behind_latest"] == 0
    workers = {w["worker_id"]: w for w in doc["workers"]}
    assert {w: x["state"] for w, x in workers.items()} == {
        "w-alive": "alive",
        "w-next": "alive",
        "w-dead": "dead",
    }
    assert workers["w-dead"]["heartbeat_age_s"] >= 119
    assert workers["w-alive"]["leases"] == 3  # the ended lease is not counted

    # A minute of lease: on a loaded machine the next calls may come more than 10 s after w-alive's heartbeat,
    # which must still count as alive (w-dead's is two minutes old).
    text = _cli(emulators, names, "status", "--no-lag", "--lease-duration", "60").stdout  # --no-lag: accepted
    assert "1500" in text and "? no owner" in text
    assert "halted at 4242/0 since " in text
    assert "handing over to w-next" in text
    assert "owner w-dead is dead" in text

    began = time.monotonic()
    watched = _cli(
        emulators, names, "status", "--watch", "--count", "2", "--no-lag", "--lease-duration", "60"
    )
    assert time.monotonic() - began >= 1.0  # two redraws, a second apart
    for needle in ("w-dead", "dead", "halted at 4242/0", "handing over to w-next", released):
        assert needle in watched.stdout
    assert watched.stdout.count("fleet at ") >= 1
