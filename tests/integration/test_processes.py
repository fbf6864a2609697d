"""Workers as real processes (``python -m consumer run``): SIGTERM hand-over and a SIGSTOP zombie."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.errors import CheckpointRejectedError
from consumer.records import Position

from .support import (
    LEASES,
    PROCESS_START,
    REPO,
    create_stream,
    make_names,
    put_records,
    read_journal,
    spawn_worker,
    stop_process,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration


def _leases(dynamodb, table: str) -> dict[str, dict]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {i["lease_key"]["S"]: i for i in items}


def _deliveries(path, worker: str | None = None) -> list[dict]:
    return [e for e in read_journal(path) if e["k"] == "d" and (worker is None or e["w"] == worker)]


def test_sigterm_releases_every_lease_and_the_next_worker_starts_at_the_exact_checkpoint(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    shards = create_stream(kinesis_client, names.stream, 2)
    first = put_records(kinesis_client, names.stream, [f"a{i}".encode() for i in range(100)])
    journal = tmp_path / "journal.jsonl"
    proc = spawn_worker(emulators, names, "a", journal)
    try:
        wait_until(
            lambda: len(_deliveries(journal, "a")) >= 100, timeout=PROCESS_START, what="a delivered all"
        )
    finally:
        began = time.monotonic()
        code = stop_process(proc)
    took = time.monotonic() - began
    assert code == 0
    assert took < 10, f"shutdown took {took:.1f}s, over the configured deadline"
    leases = _leases(dynamodb_client, names.lease_table)
    assert not any(k.startswith("worker#") for k in leases)  # deregistered
    assert all("owner" not in v for k, v in leases.items())  # released explicitly, nobody waits for expiry
    cps = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    last = {}
    for r in first:
        last[r["ShardId"]] = r["SequenceNumber"]
    assert {s: c[0] for s, c in cps.items()} == last
    second = put_records(kinesis_client, names.stream, [f"b{i}".encode() for i in range(40)])
    proc_b = spawn_worker(emulators, names, "b", journal)
    try:
        wait_until(
            lambda: len(_deliveries(journal, "b")) >= 40, timeout=PROCESS_START, what="b delivered the rest"
        )
    finally:
        assert stop_process(proc_b) == 0
    inits = {e["s"]: e["start"] for e in read_journal(journal) if e["k"] == "init" and e["w"] == "b"}
    assert inits == {s: f"{last[s]}/0" for s in shards}  # started exactly at the checkpoint
    got_b = [e["q"] for e in _deliveries(journal, "b")]
    assert sorted(got_b) == sorted(r["SequenceNumber"] for r in second)  # nothing again, nothing skipped


def test_paused_worker_loses_its_lease_and_cannot_checkpoint(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    journal = tmp_path / "journal.jsonl"
    zombie = spawn_worker(emulators, names, "zombie", journal)
    standby = None
    try:
        put_records(kinesis_client, names.stream, [b"z0", b"z1"])
        wait_until(
            lambda: len(_deliveries(journal, "zombie")) >= 2,
            timeout=PROCESS_START,
            what="zombie owns and delivers",
        )
        standby = spawn_worker(emulators, names, "standby", journal)
        wait_until(
            lambda: "worker#standby" in _leases(dynamodb_client, names.lease_table),
            timeout=PROCESS_START,
            what="standby up",
        )
        old_epoch = stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][2]
        zombie.send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        put_records(kinesis_client, names.stream, [f"p{i}".encode() for i in range(10)])
        wait_until(
            lambda: len(_deliveries(journal, "standby")) >= 10,
            timeout=LEASES.lease_duration + 15,
            what="standby takes over after the lease duration",
        )
        takeover = min(e["t"] for e in _deliveries(journal, "standby"))
        assert takeover - stopped_at >= LEASES.lease_duration  # never before the lease could have expired
        zombie.send_signal(signal.SIGCONT)
        resumed_at = time.time()
        put_records(kinesis_client, names.stream, [f"q{i}".encode() for i in range(5)])
        wait_until(
            lambda: any(e["k"] == "lease_lost" and e["w"] == "zombie" for e in read_journal(journal)),
            what="zombie told lease_lost",
        )
        wait_until(lambda: len(_deliveries(journal, "standby")) >= 15, what="standby keeps going")
        late = [e for e in _deliveries(journal, "zombie") if e["t"] >= stopped_at]
        assert not late, f"zombie delivered after it was paused: {late}"
        # Its checkpoint with the old epoch is refused; the stored one carries the new owner's epoch.
        with pytest.raises(CheckpointRejectedError) as info:
            DynamoDBCheckpointStore(dynamodb_client, names.checkpoint_table).save(
                names.stream, shard, old_epoch, Position("9" * 40)
            )
        assert info.value.stale_epoch
        assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][2] > old_epoch
        assert resumed_at > takeover
    finally:
        for proc in (zombie, standby):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                stop_process(proc)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CONSUMER_LEASE_TABLE": "no-such-table"}, "DynamoDB table 'no-such-table' does not exist"),
        ({"CONSUMER_STREAMS": "no-such-stream"}, "Kinesis stream 'no-such-stream' does not exist"),
        ({"CONSUMER_PROCESSOR": "nowhere.mod:Proc"}, "cannot import module 'nowhere.mod'"),
        ({"CONSUMER_LEASE_DURATION_SECONDS": "-1"}, "CONSUMER_LEASE_DURATION_SECONDS"),
    ],
)
def test_bad_input_exits_with_a_clear_error(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path, env, message
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    proc = spawn_worker(emulators, names, "bad", tmp_path / "j.jsonl", **env)
    code = proc.wait(30)
    log = (tmp_path / "j.bad.log").read_text()
    assert code == 2
    assert message in log
    if "CONSUMER_LEASE_TABLE" not in env:  # it registered, then failed: no member is left behind
        items = dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"]
        assert not [i for i in items if i["lease_key"]["S"].startswith("worker#")]


def test_create_tables_command(emulators, dynamodb_client, unique_name) -> None:
    lt, ct = unique_name("l"), unique_name("c")
    out = subprocess.run(
        [sys.executable, "-m", "consumer", "create-tables", "--lease-table", lt, "--checkpoint-table", ct],
        cwd=REPO,
        env={**__import__("os").environ, **emulators.env()},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "tables ready" in out.stdout
    for table in (lt, ct):  # (list_tables pages at 100 names; the session's emulator holds more)
        assert dynamodb_client.describe_table(TableName=table)["Table"]["TableStatus"] == "ACTIVE"
