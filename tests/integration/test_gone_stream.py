"""A stream deleted under a running worker (``python -m consumer run``, two streams): the leader's discovery
hears Kinesis say the stream does not exist, says so once (``stream_gone``), assigns its leases to nobody (no
churn: no epoch moves, no more failures), and the other stream goes on; once a stream of that name exists
again it says so (``stream_back``), starts its leases afresh (a stream created again is a new stream: the old
one's checkpoints do not apply) and reads it. Before, each of its shards was taken, failed and was released
several times a second, for ever; and later the new stream's shards that had an old checkpoint failed for good.
``status`` (the CLI) shows the gone stream's shards ``stream gone`` from the leader's heartbeat, and no more once
it is back (before, ``released``, as if the leader would assign them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .support import (
    Names,
    create_stream,
    log_events,
    make_names,
    put_numbered,
    read_journal,
    run_cli,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration


def _leases(dynamodb: Any, table: str, stream: str) -> dict[str, tuple[int, str | None]]:
    """shard id -> (epoch, owner) of ``stream``'s leases."""
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        item["shard_id"]["S"]: (int(item["epoch"]["N"]), item.get("owner", {}).get("S"))
        for item in items
        if item["lease_key"]["S"].startswith(f"shard#{stream}#")
    }


def _heartbeat(dynamodb: Any, table: str, worker: str) -> int:
    item = dynamodb.get_item(
        TableName=table, Key={"lease_key": {"S": f"worker#{worker}"}}, ConsistentRead=True
    )
    return int(item["Item"]["heartbeat"]["N"])


def _status(emulators: Any, names: Names) -> tuple[dict[str, Any], str]:
    """``status --json`` and ``status`` (the table), from the CLI."""
    doc, text = (run_cli(emulators, names, "status", *flag) for flag in (["--json"], []))
    assert doc.returncode == 0 and text.returncode == 0, (doc.stderr, text.stderr)
    return json.loads(doc.stdout), text.stdout


def _states(doc: dict[str, Any], stream: str) -> set[str]:
    return {x["state"] for x in doc["leases"] if x["stream"] == stream}


def test_a_deleted_stream_is_left_alone_told_once_and_read_again_when_it_is_back(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    other = unique_name("other")
    create_stream(kinesis_client, names.stream, 2)
    create_stream(kinesis_client, other, 1)
    put_numbered(kinesis_client, names.stream, "g", 4)
    put_numbered(kinesis_client, other, "a", 4)
    journal = tmp_path / "journal.jsonl"
    log = journal.with_suffix(".w.log")
    delivered = lambda: {e["p"] for e in read_journal(journal) if e["k"] == "d"}  # noqa: E731
    proc = spawn_worker(emulators, names, "w", journal, CONSUMER_STREAMS=f"{names.stream},{other}")
    try:
        wait_until(lambda: len(delivered()) == 8, timeout=30, what="both streams delivered")
        kinesis_client.delete_stream(StreamName=names.stream, EnforceConsumerDeletion=True)
        wait_until(
            lambda: log_events(log, "stream_gone"), timeout=20, what="the worker says the stream is gone"
        )

        # Whatever was under way when discovery heard of it (a take, a failure) settles: an assignment planned
        # just before may still land, fail and be released. Three heartbeats (1.1 s apart) after the leases
        # were all free, they are free again and stay so.
        def released() -> bool:
            return all(
                owner is None
                for _, owner in _leases(dynamodb_client, names.lease_table, names.stream).values()
            )

        wait_until(released, timeout=10, what="the gone stream's leases released")
        settle = _heartbeat(dynamodb_client, names.lease_table, "w")
        wait_until(
            lambda: _heartbeat(dynamodb_client, names.lease_table, "w") >= settle + 3,
            timeout=15,
            what="three heartbeats for what was under way",
        )
        wait_until(released, timeout=10, what="the gone stream's leases released again")
        leases = _leases(dynamodb_client, names.lease_table, names.stream)
        failures = len(log_events(log, "shard_failed"))
        # A few seconds of a running fleet: three heartbeats (1.1 s apart), several scans and discoveries.
        beat = _heartbeat(dynamodb_client, names.lease_table, "w")
        wait_until(
            lambda: _heartbeat(dynamodb_client, names.lease_table, "w") >= beat + 3,
            timeout=15,
            what="three more heartbeats",
        )
        put_numbered(kinesis_client, other, "b", 3)
        wait_until(lambda: {"b0", "b1", "b2"} <= delivered(), timeout=15, what="the other stream goes on")
        # The leader's heartbeats since (six) carry the gone stream, for status: its shards show so.
        doc, text = _status(emulators, names)
        assert doc["gone_streams"] == [names.stream], doc
        assert _states(doc, names.stream) == {"stream gone"} and _states(doc, other) == {"running"}, doc
        assert f"stream gone: Kinesis says {names.stream} does not exist; assigned to nobody" in text, text
        assert proc.poll() is None
        assert _leases(dynamodb_client, names.lease_table, names.stream) == leases  # no take, no epoch moved
        assert len(log_events(log, "shard_failed")) == failures  # no more failures
        assert len(log_events(log, "stream_gone")) == 1  # told once
        assert not log_events(log, "discovery_failed")
        gone = log_events(log, "stream_gone")[0]
        assert gone["level"] == "WARNING" and gone["stream"] == names.stream, gone
        assert "CONSUMER_STREAMS" in gone["fix"] and "recreate" in gone["fix"], gone
        assert not [
            e for e in log_events(log, "shard_failed") if "exc" in e
        ]  # no traceback for a missing stream

        create_stream(kinesis_client, names.stream, 1)
        put_numbered(kinesis_client, names.stream, "c", 3)
        wait_until(lambda: log_events(log, "stream_back"), timeout=20, what="the worker sees the stream back")
        # Read from the initial position, whether or not the old stream's checkpoints had landed.
        wait_until(lambda: {"c0", "c1", "c2"} <= delivered(), timeout=20, what="the new stream read")
        # The old stream's second shard is not in the new one: its lease is retired, not left failing.
        assert set(_leases(dynamodb_client, names.lease_table, names.stream)) == {"shardId-000000000000"}
        wait_until(
            lambda: _states(_status(emulators, names)[0], names.stream) == {"running"},
            timeout=20,
            what="status shows the stream back",
        )
        assert _status(emulators, names)[0]["gone_streams"] == []
    finally:
        assert stop_process(proc) == 0
    back = log_events(log, "stream_back")
    assert len(back) == 1 and back[0]["stream"] == names.stream, back
    [restarted] = log_events(log, "lease_restarted")
    assert (restarted["level"], restarted["shard"]) == ("WARNING", "shardId-000000000000"), restarted


def test_a_stream_created_again_while_the_fleet_was_stopped_is_read_from_its_start(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    """The fleet read a stream and stopped; the stream was deleted and created again; the fleet starts again
    (discovery at its default interval). Its leader assigns the old leases at once, whose checkpoints the new
    shard does not hold: each fails, is given up and taken again, its epoch moving every few tenths of a
    second. Discovery's restart is made again from the lease as stored until it lands (before, it was tried
    once per discovery, conditional on the leader's scan, lost every time, and the new stream was never read:
    about two failures a second for good)."""
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "old", 3)
    journal = tmp_path / "journal.jsonl"
    delivered = lambda: {e["p"] for e in read_journal(journal) if e["k"] == "d"}  # noqa: E731
    first = spawn_worker(emulators, names, "a", journal)
    try:
        wait_until(lambda: len(delivered()) == 3, timeout=30, what="the old stream delivered")
    finally:
        assert stop_process(first) == 0  # its checkpoint is at old2
    kinesis_client.delete_stream(StreamName=names.stream, EnforceConsumerDeletion=True)
    wait_until(
        lambda: names.stream not in kinesis_client.list_streams()["StreamNames"], timeout=30, what="deleted"
    )
    create_stream(kinesis_client, names.stream, 1)
    put_numbered(kinesis_client, names.stream, "new", 3)
    second = spawn_worker(emulators, names, "b", journal, CONSUMER_DISCOVERY_INTERVAL_SECONDS="10")
    log = journal.with_suffix(".b.log")
    try:
        wait_until(lambda: {"new0", "new1", "new2"} <= delivered(), timeout=60, what="the new stream read")
    finally:
        assert stop_process(second) == 0
    [restarted] = log_events(log, "lease_restarted")
    assert restarted["shard"] == "shardId-000000000000", restarted
