"""Crashed workers leave their items behind: a new worker is not slowed by them, and the fleet forgets them."""

from __future__ import annotations

import signal
import time

import pytest

from tests.unit.helpers import Journal, RecordingProcessor

from .support import (
    LEASES,
    create_stream,
    dynamo_worker,
    make_names,
    run_in_thread,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def _worker_items(dynamodb, table: str) -> set[str]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["worker_id"]["S"] for i in items if i.get("item_type", {}).get("S") == "worker"}


def test_a_new_worker_takes_free_leases_at_once_beside_three_sigkilled_workers_items(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    other = unique_name("other")
    create_stream(kinesis_client, other, 1)
    dead = [f"crashed{i}" for i in range(3)]
    procs = [
        spawn_worker(emulators, names, wid, tmp_path / f"{wid}.jsonl", CONSUMER_STREAMS=other) for wid in dead
    ]
    try:
        wait_until(lambda: set(dead) <= _worker_items(dynamodb_client, names.lease_table), timeout=60)
    finally:
        for p in procs:
            stop_process(p, signal.SIGKILL)
    # Leftovers: their items stay, and their heartbeats age past a lease duration.
    killed = time.monotonic()
    wait_until(lambda: time.monotonic() - killed > LEASES.lease_duration, timeout=LEASES.lease_duration + 2)
    assert set(dead) <= _worker_items(dynamodb_client, names.lease_table)

    journal = Journal()
    fresh = dynamo_worker("zz-new", emulators, names, lambda: RecordingProcessor(journal, "zz-new"))
    started = time.monotonic()
    t = run_in_thread(fresh)
    try:
        wait_until(lambda: len(fresh.owned) == 2, timeout=10, what="the new worker owns both free leases")
        # "At once": well before the leftovers could expire or be forgotten (3 lease durations), with room for
        # a loaded machine (a worker process starting, its first scan, two takes).
        assert time.monotonic() - started < 1.5 * LEASES.lease_duration
        # A live worker forgets the silent items after three lease durations of watching them.
        forget_after = 3 * LEASES.lease_duration
        wait_until(
            lambda: not set(dead) & _worker_items(dynamodb_client, names.lease_table),
            timeout=forget_after + 5,
            what="the crashed workers' items to be deleted",
        )
        assert "zz-new" in _worker_items(dynamodb_client, names.lease_table)
    finally:
        fresh.request_shutdown()
        t.join(15)
