"""Two workers of one fleet (``python -m consumer run``) started with different lease durations, 3 s and 12 s
(the second beats every 4.8 s, longer than the first's whole lease). Each publishes its lease duration in its
worker item; whoever judges the other waits for the longer of the two, and the leader says once that the
settings disagree. Before, the 3-s worker took the 12-s worker's lease every few seconds while that worker
was alive and delivering (lease ping-pong, records delivered twice), or claimed the leadership from it, and
nothing in the log said why."""

from __future__ import annotations

import pytest

from .support import (
    LEASES,
    create_stream,
    log_events,
    make_names,
    put_records,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration

LONG = {"CONSUMER_LEASE_DURATION_SECONDS": "12", "CONSUMER_SAFETY_MARGIN_SECONDS": "2.4"}


def _owners(dynamodb, table: str) -> dict[str, tuple[str | None, int]]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["lease_key"]["S"]: (i.get("owner", {}).get("S"), int(i["epoch"]["N"]))
        for i in items
        if i["lease_key"]["S"].startswith("shard#")
    }


def _heartbeat(dynamodb, table: str, worker: str) -> int:
    item = dynamodb.get_item(
        TableName=table, Key={"lease_key": {"S": f"worker#{worker}"}}, ConsistentRead=True
    )
    return int(item.get("Item", {}).get("heartbeat", {}).get("N", -1))


@pytest.mark.parametrize("leader_lease", ["short", "long"])
def test_workers_with_different_lease_durations_neither_take_from_nor_depose_each_other(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path, leader_lease: str
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 2)
    put_records(kinesis_client, names.stream, [f"r{i}".encode() for i in range(20)])
    journal = tmp_path / "journal.jsonl"
    first_env, second_env = ({}, LONG) if leader_lease == "short" else (LONG, {})
    first = spawn_worker(emulators, names, "first", journal, **first_env)
    second = None
    try:
        wait_until(
            lambda: [o for o, _ in _owners(dynamodb_client, names.lease_table).values()] == ["first"] * 2,
            timeout=30,
            what="the first worker (the leader) owns both shards",
        )
        second = spawn_worker(emulators, names, "second", journal, **second_env)
        wait_until(
            lambda: (
                sorted(o or "" for o, _ in _owners(dynamodb_client, names.lease_table).values())
                == ["first", "second"]
            ),
            timeout=30,
            what="one shard each",
        )
        settled = _owners(dynamodb_client, names.lease_table)
        long_one = "second" if leader_lease == "short" else "first"
        beat = _heartbeat(dynamodb_client, names.lease_table, long_one)
        wait_until(  # three beats of the long worker: 14 s, nearly five of the short worker's leases
            lambda: _heartbeat(dynamodb_client, names.lease_table, long_one) >= beat + 3,
            timeout=30,
            what="three heartbeats of the 12-s worker",
        )
        assert _owners(dynamodb_client, names.lease_table) == settled  # nobody took a lease from anybody
    finally:
        codes = [stop_process(p) for p in (second, first) if p is not None]
    assert codes == [0, 0]
    first_log, second_log = (journal.with_suffix(f".{w}.log") for w in ("first", "second"))
    assert log_events(first_log, "lease_expired") == log_events(second_log, "lease_expired") == []
    assert log_events(second_log, "leadership_claimed") == []  # the first one led throughout
    told = log_events(first_log, "lease_duration_mismatch")
    assert [(e["worker"], e["its_lease_duration_s"]) for e in told] == [
        ("second", 12.0 if leader_lease == "short" else LEASES.lease_duration)
    ]
