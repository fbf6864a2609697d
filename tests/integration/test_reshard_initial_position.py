"""A new application started with ``CONSUMER_INITIAL_POSITION=AT_TIMESTAMP`` on a stream resharded before it
started: the children of the reshard start at the timestamp too, not at their first record."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from .support import (
    PROCESS_START,
    create_stream,
    make_names,
    put_numbered,
    read_journal,
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
