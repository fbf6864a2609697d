"""import-kcl over the network (audit D1, D4, D5): a KCL multi-stream table that still holds the leases of a
former stream of the same name (deleted and created again: the same shard ids) next to the live ones; two
leases for one shard; ``--timestamp`` as the KCL's ``initialPositionInStreamExtended`` (epoch seconds); a
finished lease of a shard the stream no longer lists, in the plan's lines."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.integration.support import (
    REPO,
    create_stream,
    kcl_lease_table,
    make_names,
    put_records,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration

_ACCOUNT = "123456789012"


def _lease(key: str, checkpoint: str, counter: int = 3) -> dict[str, Any]:
    """A lease item as the KCL (2.x/3.x) leaves it when its fleet is stopped."""
    return {
        "leaseKey": {"S": key},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": "0"},
        "leaseCounter": {"N": str(counter)},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
    }


def _cli(emulators: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", "import-kcl", *args, "--failover-millis", "300"],
        cwd=REPO,
        env={**os.environ, **emulators.env(), "CONSUMER_LOG_LEVEL": "WARNING"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _errors(out: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in out.stderr.splitlines() if not line.startswith("{")]


def _created(kinesis: Any, stream: str) -> float:
    summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    return float(summary["StreamCreationTimestamp"].timestamp())


def _gone(kinesis: Any, stream: str) -> bool:
    try:
        kinesis.describe_stream_summary(StreamName=stream)
    except kinesis.exceptions.ResourceNotFoundException:
        return True
    return False


def test_leases_of_a_former_stream_of_the_same_name_are_left_out_and_the_live_shard_resumes(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """Before: both leases of shard 0 became one, silently, and the former stream's SHARD_END won: the live
    shard was imported as ended and never read (0 of its records delivered)."""
    names = make_names(unique_name, dynamodb_client)
    stream = names.stream
    create_stream(kinesis_client, stream, 1)
    old_epoch = int(_created(kinesis_client, stream))
    kinesis_client.delete_stream(StreamName=stream)
    wait_until(lambda: _gone(kinesis_client, stream), 30, "the former stream deleted")
    wait_until(lambda: time.time() >= old_epoch + 1.5, 3, "a later second")
    s0, s1 = create_stream(kinesis_client, stream, 2)  # shard ids as the former stream's
    epoch = int(_created(kinesis_client, stream))
    assert epoch > old_epoch
    seqs: dict[str, list[str]] = {s0: [], s1: []}
    for r in put_records(kinesis_client, stream, [f"r-{i}".encode() for i in range(40)]):
        seqs[r["ShardId"]].append(r["SequenceNumber"])
    assert min(len(v) for v in seqs.values()) >= 3, seqs

    def key(e: int, shard: str) -> str:
        return f"{_ACCOUNT}:{stream}:{e}:{shard}"

    old_end = _lease(key(old_epoch, s0), "SHARD_END", counter=7)
    old_position = _lease(key(old_epoch, s1), "49" + "0" * 54)  # the former stream's: no position now
    live = [_lease(key(epoch, s0), seqs[s0][1]), _lease(key(epoch, s1), seqs[s1][2])]
    old_first, live_first = unique_name("kclold"), unique_name("kcllive")
    kcl_lease_table(
        dynamodb_client, old_first, [old_end, *live]
    )  # the data-loss case: the old SHARD_END first
    kcl_lease_table(dynamodb_client, live_first, [*live, old_end, old_position])
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)

    for table, left_out in ((old_first, [old_end]), (live_first, [old_end, old_position])):
        dry = _cli(emulators, "--kcl-table", table, *tables, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        lines = dry.stdout.splitlines()
        assert lines[0] == (
            f"plan (2 shards, parents first; {len(left_out)} KCL leases left out; nothing written: --dry-run)"
        )
        assert f"  {stream}/{s0}: KCL {seqs[s0][1]}/0 -> {seqs[s0][1]}/0: create (ours before: -)" in lines
        assert f"  {stream}/{s1}: KCL {seqs[s1][2]}/0 -> {seqs[s1][2]}/0: create (ours before: -)" in lines
        left = [line for line in lines if ": left out (lease " in line]
        assert [line.split(": left out (lease ")[1].split(")")[0] for line in left] == [
            item["leaseKey"]["S"] for item in left_out
        ], dry.stdout
        assert all(f"a former stream {stream!r} (creationEpoch {old_epoch} = " in line for line in left), left
        assert all(f"the stream now was created {epoch} = " in line for line in left), left
    assert dynamodb_client.scan(TableName=names.lease_table)["Items"] == []  # a dry run writes nothing

    done = _cli(emulators, "--kcl-table", old_first, *tables)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"imported 2 KCL leases from {old_first} (parents first; 1 KCL leases left out)\n"
    )
    assert (
        f"  {stream}/{s0}: KCL SHARD_END: left out (lease {key(old_epoch, s0)}): a former stream"
        in done.stdout
    )
    states = {
        i["shard_id"]["S"]: i["state"]["S"]
        for i in dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"]
        if i.get("item_type", {}).get("S") == "lease"
    }
    assert states == {s0: "ACTIVE", s1: "ACTIVE"}, states  # the live shard is not ended
    cps = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    assert (cps[s0][0], cps[s1][0]) == (seqs[s0][1], seqs[s1][2])


def test_two_leases_for_one_shard_are_refused_in_one_line_with_nothing_written(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    epoch = int(_created(kinesis_client, names.stream))
    table = unique_name("kcltwo")
    # A table with both key forms (an application moved to multi-stream mode): both are this stream's shard.
    kcl_lease_table(
        dynamodb_client,
        table,
        [_lease(shard, "TRIM_HORIZON"), _lease(f"{_ACCOUNT}:{names.stream}:{epoch}:{shard}", "LATEST")],
    )
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)
    out = _cli(emulators, "--kcl-table", table, "--stream", names.stream, *tables)
    errors = _errors(out)
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert errors[0].startswith(f"error: --kcl-table: 2 KCL leases map to {names.stream}/{shard} ("), errors
    assert "Traceback" not in out.stderr
    assert dynamodb_client.scan(TableName=names.lease_table)["Items"] == []


def test_timestamp_as_epoch_seconds_and_a_finished_expired_lease_in_the_plan(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """Before: ``--timestamp: must be ISO-8601 ...; got '1577836800'`` after the hint said to give
    initialPositionInStreamExtended; and the finished lease left out was only a JSON line on stderr."""
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    (first,) = [r["SequenceNumber"] for r in put_records(kinesis_client, names.stream, [b"a"])]
    table = unique_name("kclats")
    kcl_lease_table(
        dynamodb_client,
        table,
        [_lease(shard, "AT_TIMESTAMP"), _lease("shardId-000000000042", "SHARD_END")],
    )
    args = ("--kcl-table", table, "--stream", names.stream, "--dry-run")
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)
    hint = _cli(emulators, *args, *tables)
    assert hint.returncode == 2 and "initialPositionInStreamExtended: epoch seconds" in hint.stderr, (
        hint.stderr
    )
    for given in ("1577836800", "1577836800.5"):
        out = _cli(emulators, *args, *tables, "--timestamp", given)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0] == "plan (1 shards, parents first; 1 KCL leases left out; nothing written: --dry-run)"
        assert lines[1].startswith(f"  {names.stream}/{shard}: KCL AT_TIMESTAMP -> {first}/-1: create"), lines
        assert "just before the first record at 2020-01-01T00:00:00" in lines[1], lines
        assert lines[2] == (
            f"  {names.stream}/shardId-000000000042: KCL SHARD_END: left out (lease shardId-000000000042): "
            "finished, and its shard is no longer listed (expired past the retention period)"
        )
