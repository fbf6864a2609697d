"""A new application started on a stream resharded before it started: under ``AT_TIMESTAMP`` the children of
the reshard start at the timestamp too, and under ``LATEST`` at ``LATEST`` (their parent is skipped), not at
their first record."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from consumer.leases.model import lease_key

from .support import (
    PROCESS_START,
    create_stream,
    make_names,
    put_numbered,
    read_journal,
    run_cli,
    spawn_worker,
    stop_process,
    wait_active,
    wait_until,
)

pytestmark = pytest.mark.integration


def test_children_of_an_earlier_split_start_at_the_initial_timestamp(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [parent] = create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "parent-", 10)
    kinesis_client.split_shard(StreamName=names.stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(kinesis_client, names.stream)
    put_numbered(kinesis_client, names.stream, "before-", 40)  # into the children, before T
    # T lies strictly between the last record put before it and the first one put after it.
    before_done = time.time()
    wait_until(lambda: time.time() > before_done + 0.02, what="the clock to pass T")
    timestamp = datetime.fromtimestamp(before_done + 0.01, UTC)
    after = put_numbered(kinesis_client, names.stream, "after-", 40)
    shards = kinesis_client.list_shards(StreamName=names.stream)["Shards"]
    assert len(shards) == 3 and len(after) == 40

    journal = tmp_path / "j.jsonl"
    proc = spawn_worker(
        emulators,
        names,
        "ts-1",
        journal,
        CONSUMER_INITIAL_POSITION="AT_TIMESTAMP",
        CONSUMER_INITIAL_TIMESTAMP=timestamp.isoformat().replace("+00:00", "Z"),
    )
    try:

        def delivered() -> list[str]:
            return [e["p"] for e in read_journal(journal) if e["k"] == "d"]

        # Each child is read in order: had it started at its first record, its "before-" records would have
        # come before its "after-" ones.
        wait_until(
            lambda: sum(p.startswith("after-") for p in delivered()) == 40,
            PROCESS_START,
            what="every record put after T",
        )
        got = delivered()
        assert sorted(got) == sorted(f"after-{i}" for i in range(40)), got
        inits = {e["s"] for e in read_journal(journal) if e["k"] == "init"}
        assert inits >= {s["ShardId"] for s in shards if s["ShardId"] != parent}
    finally:
        assert stop_process(proc) == 0


def test_under_latest_the_children_of_an_earlier_split_start_at_latest_and_the_parent_is_skipped(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [parent] = create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "parent-", 10)
    kinesis_client.split_shard(StreamName=names.stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(kinesis_client, names.stream)
    put_numbered(kinesis_client, names.stream, "before-", 40)  # into the children, before the start
    children = [s["ShardId"] for s in kinesis_client.list_shards(StreamName=names.stream)["Shards"]]
    children.remove(parent)
    hash_keys = {"1": "low", str(2**127 + 1): "high"}  # one record into each child

    journal = tmp_path / "j.jsonl"
    proc = spawn_worker(emulators, names, "latest-1", journal, CONSUMER_INITIAL_POSITION="LATEST")
    try:
        put = {"n": 0, "at": 0.0}

        def after_read_in_both_children() -> bool:
            """Records put after the start, a few a second, until each child delivered one: what LATEST
            promises is the records put after its first read, which the test cannot see from outside."""
            delivered = [e for e in read_journal(journal) if e["k"] == "d"]
            if {e["s"] for e in delivered if e["p"].startswith("after-")} == set(children):
                return True
            if time.monotonic() - put["at"] >= 0.2:
                for key, side in hash_keys.items():
                    kinesis_client.put_record(
                        StreamName=names.stream,
                        Data=f"after-{side}-{put['n']}".encode(),
                        PartitionKey="k",
                        ExplicitHashKey=key,
                    )
                put["n"], put["at"] = put["n"] + 1, time.monotonic()
            return False

        wait_until(after_read_in_both_children, PROCESS_START, what="a record put after the start, per child")
        got = [e["p"] for e in read_journal(journal) if e["k"] == "d"]
        # Each child is read in order: had it started at its first record, its "before-" records would have
        # come before its first "after-" one.
        assert not [p for p in got if not p.startswith("after-")], got
        inits = {e["s"] for e in read_journal(journal) if e["k"] == "init"}
        assert inits == set(children)  # the parent was never started
        item = dynamodb_client.get_item(
            TableName=names.lease_table, Key={"lease_key": {"S": lease_key(names.stream, parent)}}
        )["Item"]
        assert item["state"] == {"S": "ENDED"} and item["skipped"] == {"BOOL": True}
        assert "owner" not in item
        # The operator's view: status shows it skipped; a replay of it alone says why it cannot be done.
        status = run_cli(emulators, names, "status", "--json")
        assert status.returncode == 0, status.stderr
        states = {x["shard_id"]: x["state"] for x in json.loads(status.stdout)["leases"]}
        assert states == {parent: "skipped", **{c: "running" for c in children}}, states
        replay = run_cli(
            emulators,
            names,
            "replay",
            "--stream",
            names.stream,
            "--shard",
            parent,
            "--timestamp",
            "2020-01-01T00:00:00Z",
            stdin="",
        )
        assert replay.returncode != 0 and "Traceback" not in replay.stderr, replay.stderr
        assert "was skipped (closed before the application first listed it, under LATEST)" in replay.stderr
    finally:
        assert stop_process(proc) == 0
