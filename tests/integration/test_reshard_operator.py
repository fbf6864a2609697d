"""The operator's commands on a resharded stream, run as ``python -m consumer``: ``replay --timestamp`` says
which ended shards it leaves out, and ``status`` shows a child waiting for its parent."""

from __future__ import annotations

import json

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease
from tests.unit.helpers import Journal, RecordingProcessor

from .support import (
    create_stream,
    dynamo_worker,
    make_names,
    put_numbered,
    run_cli,
    run_in_thread,
    wait_active,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_a_stream_wide_replay_names_each_ended_shard_it_leaves_out(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [parent] = create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "parent-", 10)
    kinesis_client.split_shard(StreamName=names.stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(kinesis_client, names.stream)
    put_numbered(kinesis_client, names.stream, "child-", 20)
    children = sorted(
        s["ShardId"]
        for s in kinesis_client.list_shards(StreamName=names.stream)["Shards"]
        if s["ShardId"] != parent
    )
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    journal = Journal()
    worker = dynamo_worker("rs-w1", emulators, names, lambda: RecordingProcessor(journal, "rs-w1"))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(journal.deliveries) == 30, 30, what="every record delivered")
        wait_until(
            lambda: any(x.shard_id == parent and x.ended for x in repo.snapshot().leases),
            30,
            what="the parent's lease ended",
        )
    finally:
        worker.request_shutdown()
        t.join(15)

    # Without --yes and without a terminal: the plan is printed, nothing is moved (exit 3).
    plan = run_cli(
        emulators, names, "replay", "--stream", names.stream, "--timestamp", "2020-01-01T00:00:00Z", stdin=""
    )
    assert plan.returncode == 3, plan.stderr
    lines = plan.stdout.splitlines()
    ended = [line for line in lines if line.startswith(f"{names.stream}/{parent}:")]
    assert ended == [
        f"{names.stream}/{parent}: has ended (closed by a reshard): its records after 2020-01-01T00:00:00Z "
        "are NOT replayed (an ended shard cannot be reopened)"
    ], plan.stdout
    for child in children:
        assert any(line.startswith(f"{names.stream}/{child}: checkpoint ") for line in lines), plan.stdout
    logged = [json.loads(x) for x in plan.stderr.splitlines() if '"replay_skipped"' in x]
    assert [(x["shard"], x["level"]) for x in logged] == [(parent, "WARNING")]
    # A replay of one shard says nothing of the others.
    one = run_cli(
        emulators,
        names,
        "replay",
        "--stream",
        names.stream,
        "--shard",
        children[0],
        "--timestamp",
        "2020-01-01T00:00:00Z",
        stdin="",
    )
    assert one.returncode == 3 and "has ended" not in one.stdout, one.stdout


def test_status_shows_a_child_waiting_for_its_parent(emulators, dynamodb_client, unique_name) -> None:
    names = make_names(unique_name, dynamodb_client)
    repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)
    parent, child = "shardId-000000000000", "shardId-000000000001"
    repo.create_lease(Lease(names.stream, parent))
    repo.create_lease(Lease(names.stream, child, parents=(parent,)))
    out = run_cli(emulators, names, "status", "--json")
    assert out.returncode == 0, out.stderr
    leases = {x["shard_id"]: x for x in json.loads(out.stdout)["leases"]}
    assert leases[parent]["state"] == "released" and leases[parent]["parents"] == []
    assert leases[child]["state"] == "waiting", leases[child]
    assert leases[child]["parents"] == [parent] and leases[child]["waiting_for"] == [parent]
    text = run_cli(emulators, names, "status")
    assert text.returncode == 0, text.stderr
    assert any(
        line.split()[1:5] == [child, "waiting", "for", parent] for line in text.stdout.splitlines()[2:4]
    ), text.stdout
