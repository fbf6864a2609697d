"""import-kcl: KCL lease tables written here as the KCL writes them (single- and multi-stream keys, every
sentinel, a split shard with its parent and children, a KPL sub-sequence) are imported, and a fleet then
delivers exactly the records after each KCL checkpoint; a live KCL table is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import AggRecord

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from tests.integration.support import (
    REPO,
    create_stream,
    dynamo_worker,
    kcl_lease_table,
    make_names,
    stored_checkpoints,
    wait_active,
    wait_until,
)

pytestmark = pytest.mark.integration

_HALF = 2**127


def _lease(
    key: str, checkpoint: str, sub: int = 0, parents: tuple[str, ...] = (), owner: str = "kcl-1"
) -> dict:
    """A lease item as the KCL (2.x/3.x) writes it."""
    item: dict[str, Any] = {
        "leaseKey": {"S": key},
        "checkpoint": {"S": checkpoint},
        "checkpointSubSequenceNumber": {"N": str(sub)},
        "leaseOwner": {"S": owner},
        "leaseCounter": {"N": "120"},
        "ownerSwitchesSinceCheckpoint": {"N": "0"},
    }
    if parents:
        item["parentShardIds"] = {"SS": list(parents)}
    return item


def _put(kinesis: Any, stream: str, hash_key: int, payloads: list[bytes]) -> list[str]:
    return [
        kinesis.put_record(StreamName=stream, Data=p, PartitionKey="k", ExplicitHashKey=str(hash_key))[
            "SequenceNumber"
        ]
        for p in payloads
    ]


def _cli(emulators: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", "import-kcl", *args],
        cwd=REPO,
        env={**os.environ, **emulators.env(), "CONSUMER_LOG_LEVEL": "WARNING"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


class _Collect(BaseProcessor):
    seen: dict[tuple[str, str], list[bytes]] = defaultdict(list)
    lock = threading.Lock()

    def process_records(self, data: ProcessRecordsInput) -> None:
        with self.lock:
            for r in data.records:
                self.seen[(r.stream, r.shard_id)].append(r.data)


def test_import_then_the_fleet_delivers_exactly_after_each_kcl_checkpoint(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    names = make_names(unique_name, dynamodb_client)
    s1, s2 = names.stream, unique_name("multi")
    parent, shard1 = create_stream(kinesis_client, s1, 2)
    m0, m1 = create_stream(kinesis_client, s2, 2)
    # s1: a parent split into two children, and a shard with a KPL aggregate in the middle.
    _put(kinesis_client, s1, 0, [f"p-{i}".encode() for i in range(5)])
    kinesis_client.split_shard(StreamName=s1, ShardToSplit=parent, NewStartingHashKey=str(2**126))
    wait_active(kinesis_client, s1)
    shards = {s["ShardId"]: s for s in kinesis_client.list_shards(StreamName=s1)["Shards"]}
    c1, c2 = sorted(k for k, s in shards.items() if s.get("ParentShardId") == parent)
    c1_seqs = _put(kinesis_client, s1, 0, [f"c1-{i}".encode() for i in range(6)])
    _put(kinesis_client, s1, 2**126 + 1, [f"c2-{i}".encode() for i in range(4)])
    agg = AggRecord()
    for i in range(5):
        agg.add_user_record("k", f"agg-{i}".encode())
    _put(kinesis_client, s1, _HALF, [b"s1-a", b"s1-b"])
    (agg_seq,) = _put(kinesis_client, s1, _HALF, [bytes(agg.get_contents()[2])])
    _put(kinesis_client, s1, _HALF, [b"s1-c", b"s1-d"])
    # s2 (multi-stream keys): AT_TIMESTAMP on one shard, LATEST (never started) on the other.
    _put(kinesis_client, s2, 0, [f"old-{i}".encode() for i in range(3)])
    after = time.time() + 0.05
    wait_until(lambda: time.time() > after + 0.05, 2, "the clock")
    at = datetime.fromtimestamp(after, UTC)
    _put(kinesis_client, s2, 0, [f"new-{i}".encode() for i in range(3)])

    t1, t2 = unique_name("kcl"), unique_name("kclmulti")
    # A multi-stream key's creationEpoch is the stream's creation (whole seconds), as the KCL keeps it.
    created = kinesis_client.describe_stream_summary(StreamName=s2)["StreamDescriptionSummary"]
    epoch = int(created["StreamCreationTimestamp"].timestamp())
    kcl_lease_table(
        dynamodb_client,
        t1,
        [
            _lease(parent, "SHARD_END"),
            _lease(c1, c1_seqs[2], parents=(parent,)),
            _lease(c2, "TRIM_HORIZON", parents=(parent,), owner="kcl-2"),
            _lease(shard1, agg_seq, sub=2),
        ],
    )
    kcl_lease_table(
        dynamodb_client,
        t2,
        [
            _lease(f"123456789012:{s2}:{epoch}:{m0}", "AT_TIMESTAMP"),
            _lease(f"123456789012:{s2}:{epoch}:{m1}", "LATEST"),
        ],
    )
    tables = ["--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table]
    one = ["--kcl-table", t1, "--stream", s1, *tables, "--failover-millis", "300"]
    multi = ["--kcl-table", t2, *tables, "--failover-millis", "300", "--timestamp", at.isoformat()]

    dry = _cli(emulators, *one, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"{s1}/{parent}: KCL SHARD_END, owner kcl-1 -> SHARD_END: create" in dry.stdout
    assert dynamodb_client.scan(TableName=names.lease_table)["Items"] == []  # nothing written
    lines = dry.stdout.splitlines()
    assert [i for i, line in enumerate(lines) if parent in line.split(":")[0]] < [
        i for i, line in enumerate(lines) if c1 in line.split(":")[0]
    ]  # parents first

    first = _cli(emulators, *one)
    assert first.returncode == 0, first.stderr
    assert f"{s1}/{shard1}: KCL {agg_seq}/2, owner kcl-1 -> {agg_seq}/2: create" in first.stdout
    assert f"{s1}/{c2}: KCL TRIM_HORIZON, owner kcl-2 -> " in first.stdout
    m = _cli(emulators, *multi)
    assert m.returncode == 0, m.stderr
    assert f"{s2}/{m1}: KCL LATEST, owner kcl-1 -> (none: the fleet's initial position): create" in m.stdout
    before = stored_checkpoints(dynamodb_client, names.checkpoint_table)
    again = _cli(emulators, *one)  # idempotent
    assert again.returncode == 0 and again.stdout.count(": unchanged (ours before:") == 4, again.stdout
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table) == before

    _Collect.seen.clear()
    worker = dynamo_worker("w1", emulators, names, _Collect, streams=(s1, s2))
    worker.start()
    expected = {
        (s1, parent): [],
        (s1, c1): [b"c1-3", b"c1-4", b"c1-5"],
        (s1, c2): [f"c2-{i}".encode() for i in range(4)],
        (s1, shard1): [b"agg-3", b"agg-4", b"s1-c", b"s1-d"],
        (s2, m0): [b"new-0", b"new-1", b"new-2"],
    }
    try:
        wait_until(
            lambda: all(len(_Collect.seen.get(k, [])) >= len(v) for k, v in expected.items()),
            30,
            "the deliveries",
        )
    finally:
        worker.stop(15)
    assert {k: _Collect.seen.get(k, []) for k in expected} == expected

    # Ours are ahead now: a later import keeps them, unless forced back to the KCL's.
    kept = _cli(emulators, *one)
    assert (
        kept.returncode == 0
        and f"{s1}/{c1}: KCL {c1_seqs[2]}/0, owner kcl-1 -> {c1_seqs[2]}/0: keep: ours is ahead"
        in kept.stdout
    )
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[c1][0] == c1_seqs[5]
    forced = _cli(emulators, *one, "--force")
    assert forced.returncode == 0 and "move back (forced)" in forced.stdout
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[c1][0] == c1_seqs[2]


def test_a_live_kcl_table_is_refused_in_one_line(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    table = unique_name("kcl")
    kcl_lease_table(dynamodb_client, table, [_lease(shard, "TRIM_HORIZON")])
    stop = threading.Event()

    def renew() -> None:  # a KCL worker renewing its lease
        while not stop.wait(0.1):
            dynamodb_client.update_item(
                TableName=table,
                Key={"leaseKey": {"S": shard}},
                UpdateExpression="ADD leaseCounter :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
            )

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    try:
        out = _cli(
            emulators,
            *("--kcl-table", table, "--stream", names.stream, "--failover-millis", "600"),
            *("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table),
        )
    finally:
        stop.set()
        renewer.join()
    assert out.returncode == 2
    errors = [line for line in out.stderr.splitlines() if not line.startswith("{")]
    assert len(errors) == 1 and errors[0].startswith("error: refusing to import: the KCL fleet is alive"), (
        out.stderr
    )
    assert "Traceback" not in out.stderr
    assert dynamodb_client.scan(TableName=names.lease_table)["Items"] == []


def test_missing_kcl_table_is_one_line(emulators: Any, dynamodb_client: Any, unique_name: Any) -> None:
    out = _cli(emulators, "--lease-table", "x", "--checkpoint-table", "y")
    assert out.returncode == 2 and "error: --kcl-table: is required" in out.stderr
    names = make_names(unique_name, dynamodb_client)
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)
    gone = _cli(emulators, "--kcl-table", "no-such-kcl-table", "--stream", "s", "--force", *tables)
    errors = [line for line in gone.stderr.splitlines() if not line.startswith("{")]
    assert gone.returncode == 2 and len(errors) == 1 and "no-such-kcl-table" in errors[0], gone.stderr
    assert "Traceback" not in out.stderr + gone.stderr


def test_leases_that_do_not_belong_to_the_stream_are_refused_before_anything_is_written(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """A typo in --stream, a checkpoint that is no position in its shard, a lease of a shard the stream does
    not have, a number that is not one: one line each, exit 2, nothing written. A finished lease of a shard
    that is no longer listed (expired) is left out, and the rest is imported. (A checkpoint of another stream
    with the same shard ids is refused the same way on AWS, whose GetShardIterator refuses a sequence number
    of another stream; kinesis-local numbers the shards of streams made in the same second alike.)"""
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    seqs = _put(kinesis_client, names.stream, 0, [b"a", b"b", b"c"])
    gone = "shardId-000000000042"
    good, bad_sub, lost = unique_name("kcl"), unique_name("kclsub"), unique_name("kcllost")
    nowhere = unique_name("kclseq")
    kcl_lease_table(dynamodb_client, nowhere, [_lease(shard, "123")])
    kcl_lease_table(dynamodb_client, good, [_lease(shard, seqs[1]), _lease(gone, "SHARD_END")])
    not_a_number = _lease(shard, seqs[1])
    not_a_number["checkpointSubSequenceNumber"] = {"S": "abc"}
    kcl_lease_table(dynamodb_client, bad_sub, [not_a_number])
    kcl_lease_table(dynamodb_client, lost, [_lease(gone, seqs[1])])
    ended = unique_name("kclend")
    kcl_lease_table(dynamodb_client, ended, [_lease(shard, "SHARD_END")])  # the shard is open: never ended
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)
    cases = [
        (
            ("--kcl-table", ended, "--stream", names.stream),
            f"error: --stream: KCL lease {shard} is at SHARD_END, but stream {names.stream!r} lists shard "
            f"{shard} as open",
        ),
        (("--kcl-table", good, "--stream", names.stream + "x"), "error: --stream: Kinesis stream"),
        (
            ("--kcl-table", nowhere, "--stream", names.stream),
            f"error: --stream: KCL lease {shard}: 123 is not in",
        ),
        (
            ("--kcl-table", lost, "--stream", names.stream),
            f"error: --stream: Kinesis stream {names.stream!r} has no shard",
        ),
        (("--kcl-table", bad_sub, "--stream", names.stream), "error: --kcl-table: lease"),
    ]
    for args, expected in cases:
        out = _cli(emulators, *args, "--force", *tables)
        errors = [line for line in out.stderr.splitlines() if not line.startswith("{")]
        assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith(expected), (args, out.stderr)
        assert "Traceback" not in out.stderr
    assert dynamodb_client.scan(TableName=names.lease_table)["Items"] == []

    done = _cli(emulators, "--kcl-table", good, "--stream", names.stream, "--force", *tables)
    assert done.returncode == 0 and f"imported 1 KCL leases from {good}" in done.stdout, done.stderr
    assert (
        f"{names.stream}/{gone}: KCL SHARD_END, owner kcl-1: left out (lease {gone}): finished" in done.stdout
    )
    assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == seqs[1]


def test_an_import_into_a_lease_table_that_does_not_go_with_the_checkpoint_table_is_refused(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """Imported once; then imported again into a new lease table beside the same checkpoint table: refused in
    one line naming --checkpoint-table, as `run` refuses that pair (before: a plan to create, then "a lease of
    ours appeared while importing; run it again", for ever)."""
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    kcl = unique_name("kcl")
    kcl_lease_table(dynamodb_client, kcl, [_lease(shard, "TRIM_HORIZON")])
    args = ("--kcl-table", kcl, "--stream", names.stream, "--force")
    first = _cli(
        emulators, *args, "--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table
    )
    assert first.returncode == 0, first.stderr
    DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table).take(
        Lease(names.stream, shard), "w", None
    )  # a fleet read it: its checkpoint is at epoch 1
    new = make_names(unique_name, dynamodb_client)
    again = _cli(
        emulators, *args, "--lease-table", new.lease_table, "--checkpoint-table", names.checkpoint_table
    )
    errors = [line for line in again.stderr.splitlines() if not line.startswith("{")]
    assert again.returncode == 2 and len(errors) == 1, again.stderr
    assert errors[0].startswith(
        f"error: --checkpoint-table: DynamoDB table '{names.checkpoint_table}' holds"
    ), errors
    assert "Point --lease-table and --checkpoint-table at the tables of one application" in errors[0]
    assert dynamodb_client.scan(TableName=new.lease_table)["Items"] == []


def test_a_parent_the_kcl_never_had_a_lease_of_is_not_the_imported_childs(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Any
) -> None:
    """A KCL at LATEST started after a split: its leases are the two children, naming the parent it never had
    a lease of. Imported, they name no parent (as discovery names only the parents the application reads) and
    fix LATEST at the import, so a fleet at LATEST reads them from then; before, each named the parent and
    was read from its first record, every record already in it delivered."""
    names = make_names(unique_name, dynamodb_client)
    (parent,) = create_stream(kinesis_client, names.stream, 1)
    kinesis_client.split_shard(StreamName=names.stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    wait_active(kinesis_client, names.stream)
    children = sorted(
        s["ShardId"]
        for s in kinesis_client.list_shards(StreamName=names.stream)["Shards"]
        if s["ShardId"] != parent
    )
    kcl = unique_name("kcl")
    kcl_lease_table(dynamodb_client, kcl, [_lease(c, "LATEST", parents=(parent,)) for c in children])
    before = int(time.time() * 1000)
    tables = ("--lease-table", names.lease_table, "--checkpoint-table", names.checkpoint_table)
    out = _cli(emulators, "--kcl-table", kcl, "--stream", names.stream, "--failover-millis", "300", *tables)
    assert out.returncode == 0, out.stderr
    items = {i["shard_id"]["S"]: i for i in dynamodb_client.scan(TableName=names.lease_table)["Items"]}
    assert set(items) == set(children)
    for item in items.values():
        assert item["parents"]["L"] == [], item
        assert before <= int(item["latest_ms"]["N"]) <= int(time.time() * 1000), item
