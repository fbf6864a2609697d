"""Operator commands (status, drain, replay) against the emulators, run as ``python -m consumer``."""

from __future__ import annotations

import dataclasses
import json
import subprocess

import pytest

from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.progress import decode_progress
from tests.unit.helpers import Journal, RecordingProcessor

from .support import (
    PROCESS_START,
    create_stream,
    dynamo_worker,
    make_names,
    put_numbered,
    put_records,
    read_journal,
    run_cli,
    run_in_thread,
    spawn_worker,
    stored_checkpoints,
    wait_until,
)

pytestmark = pytest.mark.integration


def cli(emulators, names, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(emulators, names, *args, stdin=stdin)


def test_status_lists_leases_and_workers(emulators, kinesis_client, dynamodb_client, unique_name) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    put = put_records(kinesis_client, names.stream, [b"x"] * 20)
    journal = Journal()
    worker = dynamo_worker("ops-w1", emulators, names, lambda: RecordingProcessor(journal, "ops-w1"))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(journal.deliveries) == 20)
        last = {r["ShardId"]: r["SequenceNumber"] for r in put}
        wait_until(  # auto checkpoints land within their interval (1 s)
            lambda: (
                {s: c[0] for s, c in stored_checkpoints(dynamodb_client, names.checkpoint_table).items()}
                == last
            ),
            what="both checkpoints at the last record",
        )
        # The lag status shows is what the owner published with its heartbeat: caught up, on both shards.
        repo = DynamoDBLeaseRepository(dynamodb_client, names.lease_table, names.checkpoint_table)

        def published() -> list[int | None]:
            item = repo.get_worker("ops-w1")
            progress = decode_progress(item.progress) if item is not None else {}
            return [x.millis_behind_latest for x in progress.values()]

        wait_until(lambda: published() == [0, 0], what="both shards caught up on the worker's item")
        out = cli(emulators, names, "status", "--json")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        text = cli(emulators, names, "status")
    finally:
        worker.request_shutdown()
        t.join(15)
    swapped = ("--lease-table", names.checkpoint_table, "--checkpoint-table", names.lease_table)
    wrong = cli(emulators, names, "status", *swapped)
    errors = [line for line in wrong.stderr.splitlines() if not line.startswith("{")]
    assert wrong.returncode == 2 and len(errors) == 1 and "Traceback" not in wrong.stderr, wrong.stderr
    # Refused by the tables' check, as `run` refuses them (before it, by status's own read of the checkpoints).
    assert errors[0].startswith(
        f"error: --lease-table: DynamoDB table '{names.checkpoint_table}' holds checkpoints"
    ), wrong.stderr
    assert errors[0].endswith("are --lease-table and --checkpoint-table swapped?"), wrong.stderr
    # A worker started on the tables swapped stops before it writes anything (both have the same key schema).
    swapped_names = dataclasses.replace(
        names, lease_table=names.checkpoint_table, checkpoint_table=names.lease_table
    )
    settings = (
        "--application",
        "ops",
        "--streams",
        names.stream,
        "--processor",
        "consumer.examples.logging_processor:LoggingProcessor",
    )
    run = cli(emulators, swapped_names, "run", *settings)
    errors = [line for line in run.stderr.splitlines() if not line.startswith("{")]
    assert run.returncode == 2 and len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert errors[0].startswith(
        f"error: CONSUMER_LEASE_TABLE: DynamoDB table '{names.checkpoint_table}' holds checkpoints"
    ), run.stderr
    leases = {x["shard_id"]: x for x in status["leases"]}
    assert set(leases) == set(last)
    for shard, x in leases.items():
        assert x["owner"] == "ops-w1" and x["epoch"] >= 1 and x["state"] == "running"
        assert x["owner_state"] == "alive"
        assert x["checkpoint"] == f"{last[shard]}/0"
        assert x["millis_behind_latest"] == 0
        assert x["owner_heartbeat_age_s"] is not None and x["owner_heartbeat_age_s"] < 10
    assert status["workers"] == [
        {**status["workers"][0], "worker_id": "ops-w1", "leases": 2, "state": "alive"}
    ]
    assert "ops-w1" in text.stdout and "leases (2)" in text.stdout


def test_drain_makes_the_worker_hand_over_and_exit(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    put_records(kinesis_client, names.stream, [b"y"] * 10)
    journal = tmp_path / "j.jsonl"
    proc = spawn_worker(emulators, names, "to-drain", journal)
    try:
        wait_until(lambda: sum(1 for e in read_journal(journal) if e["k"] == "d") == 10, PROCESS_START)
        out = cli(emulators, names, "drain", "to-drain")
        assert out.returncode == 0, out.stderr
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    items = dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"]
    assert not [i for i in items if i["lease_key"]["S"].startswith("worker#")]
    assert all("owner" not in i for i in items)
    missing = cli(emulators, names, "drain", "nobody")
    assert missing.returncode == 2 and "no live worker 'nobody'" in missing.stderr


def test_replay_asks_for_confirmation_names_unknowns_and_redelivers(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    (shard,) = create_stream(kinesis_client, names.stream, 1)
    seqs = put_numbered(kinesis_client, names.stream, "r", 10)
    journal = Journal()
    worker = dynamo_worker("rp", emulators, names, lambda: RecordingProcessor(journal, "rp"))
    t = run_in_thread(worker)
    try:
        wait_until(lambda: len(journal.deliveries) == 10)
        wait_until(lambda: stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == seqs[-1])
        refused = cli(emulators, names, "replay", "--stream", names.stream, "--sequence", seqs[4], stdin="")
        assert refused.returncode == 3 and "refusing to replay without confirmation" in refused.stderr
        assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == seqs[-1]
        unknown = cli(emulators, names, "replay", "--stream", "nope", "--sequence", "1", "--yes")
        assert unknown.returncode == 2 and "unknown stream 'nope'" in unknown.stderr
        bad_shard = cli(
            emulators,
            names,
            "replay",
            "--stream",
            names.stream,
            "--shard",
            "shardId-9",
            "--sequence",
            "1",
            "--yes",
        )
        assert bad_shard.returncode == 2 and "unknown shard 'shardId-9'" in bad_shard.stderr
        # --checkpoint is held to the shard like --sequence: a position the next owner can start from
        for raw, words in (("123/-1", "is not in shard"), (f"{seqs[4]}/-5", "must be -1 or more")):
            bad = cli(emulators, names, "replay", "--stream", names.stream, "--checkpoint", raw, "--yes")
            assert bad.returncode == 2 and "error: --checkpoint: " in bad.stderr and words in bad.stderr, (
                bad.stderr
            )
        assert stored_checkpoints(dynamodb_client, names.checkpoint_table)[shard][0] == seqs[-1]
        done = cli(emulators, names, "replay", "--stream", names.stream, "--sequence", seqs[4], "--yes")
        assert done.returncode == 0, done.stderr
        assert f"--checkpoint {seqs[-1]}/0" in done.stdout  # the undo command, with the old checkpoint
        assert "checkpoint_replayed" in done.stderr  # and the structured log line
        wait_until(lambda: len(journal.deliveries) == 16, what="records 4..9 delivered again")
    finally:
        worker.request_shutdown()
        t.join(15)
    assert journal.sequences() == seqs + seqs[4:]
    assert ("rp", shard, "lease_lost") in journal.events  # the old ownership ended with the replay
