"""A new application started with ``CONSUMER_INITIAL_POSITION=LATEST`` whose reading worker is SIGKILLed before
the shard's first checkpoint: the worker that takes the shard over delivers every record put after the
application started reading, none from before. Before, the new owner resolved ``LATEST`` again and every record
put between the two owners' reads was lost (13-18 of 40 in the audit with a 4 s lease; here all of them).
The same for a lease that ``import-kcl`` created from a KCL lease at ``LATEST`` (the KCL never started the
shard): it fixes ``LATEST`` at the import, as discovery does at a lease's creation (before, it recorded nothing,
and 350 of 2,000 records were lost in the audit)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from .support import (
    PROCESS_START,
    REPO,
    Names,
    create_stream,
    kcl_lease_table,
    log_events,
    make_names,
    put_numbered,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def _import_kcl_latest(emulators: Any, dynamodb: Any, names: Names, shard: str, kcl_table: str) -> int:
    """``import-kcl`` of a KCL table whose one lease is at ``LATEST``; the wall time (ms) before it ran."""
    kcl_lease_table(
        dynamodb,
        kcl_table,
        [{"leaseKey": {"S": shard}, "checkpoint": {"S": "LATEST"}, "leaseCounter": {"N": "3"}}],
    )
    before = int(time.time() * 1000)
    out = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "consumer",
                "import-kcl",
                "--kcl-table",
                kcl_table,
                "--stream",
                names.stream,
            ),
            *("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table),
            *("--failover-millis", "300"),
        ],
        cwd=REPO,
        env={**os.environ, **emulators.env()},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert f"{names.stream}/{shard}: KCL LATEST" in out.stdout and ": create" in out.stdout, out.stdout
    return before


@pytest.mark.parametrize("made_by", ["discovery", "import-kcl"])
def test_a_take_over_before_the_first_checkpoint_reads_from_when_latest_was_fixed(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path, made_by
) -> None:
    names = make_names(unique_name, dynamodb_client)
    [shard] = create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "old-", 5)  # before the application: never delivered
    if made_by == "import-kcl":
        before = _import_kcl_latest(emulators, dynamodb_client, names, shard, unique_name("kcl"))
        item = dynamodb_client.get_item(
            TableName=names.lease_table, Key={"lease_key": {"S": f"shard#{names.stream}#{shard}"}}
        )["Item"]
        listed = kinesis_client.list_shards(StreamName=names.stream)["Shards"][0]
        assert item["first_sequence"]["S"] == listed["SequenceNumberRange"]["StartingSequenceNumber"]
        assert before <= int(item["latest_ms"]["N"]) <= int(time.time() * 1000)
    journal = tmp_path / "j.jsonl"
    first = spawn_worker(emulators, names, "a", journal, CONSUMER_INITIAL_POSITION="LATEST")
    second = None
    try:
        log_a, log_b = (journal.with_suffix(f".{w}.log") for w in ("a", "b"))
        wait_until(lambda: log_events(log_a, "shard_started"), PROCESS_START, what="a reads the shard")
        second = spawn_worker(emulators, names, "b", journal, CONSUMER_INITIAL_POSITION="LATEST")
        wait_until(lambda: log_events(log_b, "worker_started"), PROCESS_START, what="b is up")
        first.kill()  # a crash before any record: nothing was checkpointed
        first.wait(10)
        put_numbered(kinesis_client, names.stream, "r-", 40)  # after the application started reading

        def delivered() -> list[str]:
            return [e["p"] for e in read_journal(journal) if e["k"] == "d"]

        wait_until(
            lambda: sum(p.startswith("r-") for p in delivered()) == 40,
            PROCESS_START,
            what="every record put after the start, by the worker that took over",
        )
        assert sorted(delivered()) == sorted(f"r-{i}" for i in range(40)), delivered()
        [started_a], [started_b] = log_events(log_a, "shard_started"), log_events(log_b, "shard_started")
        # Both read from the same moment, fixed when the lease was created.
        assert started_a["starting_position"] == started_b["starting_position"] == "AT_TIMESTAMP"
        assert started_a["from_time"] == started_b["from_time"] is not None
    finally:
        if first.poll() is None:
            first.kill()
        if second is not None:
            assert stop_process(second) == 0
