"""Workers whose wall clocks disagree by minutes, as real processes on the emulators: each sees ``time.time``
shifted (a ``sitecustomize`` on its path; the host's clock and ``time.monotonic`` untouched). The fleet still
balances after every change, whoever leads, every SIGTERM hands its leases over (one epoch step, never a
release), and nothing is lost or delivered twice."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from .support import (
    create_stream,
    make_names,
    put_records,
    read_journal,
    spawn_worker,
    stop_process,
    wait_until,
)

pytestmark = pytest.mark.integration

SITECUSTOMIZE = """
import os
import time

_offset = float(os.environ.get("TEST_WALL_CLOCK_OFFSET_SECONDS", "0"))
if _offset:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _offset
    time.time_ns = lambda: _time_ns() + int(_offset * 1e9)
"""

SHARDS = 8
FAIR_WITHIN = 25.0  # seconds after each change


def _owners(dynamodb, table: str) -> dict[str, tuple[str | None, int]]:
    items = dynamodb.scan(TableName=table, ConsistentRead=True)["Items"]
    return {
        i["lease_key"]["S"]: (i.get("owner", {}).get("S"), int(i["epoch"]["N"]))
        for i in items
        if i["lease_key"]["S"].startswith("shard#")
    }


def _leader(dynamodb, table: str) -> str | None:
    item = dynamodb.get_item(TableName=table, Key={"lease_key": {"S": "leader"}}, ConsistentRead=True)
    return item.get("Item", {}).get("owner", {}).get("S")


def _fair(dynamodb, table: str, workers: set[str]) -> bool:
    owners = _owners(dynamodb, table)
    counts = Counter(owner for owner, _ in owners.values())
    if len(owners) != SHARDS or set(counts) != workers:
        return False
    low = SHARDS // len(workers)
    return all(low <= counts[w] <= low + 1 for w in workers)


def test_skewed_wall_clocks_still_balance_hand_over_and_lose_nothing(
    emulators, kinesis_client, dynamodb_client, unique_name, tmp_path: Path
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, SHARDS)
    site = tmp_path / "skew"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    journal = tmp_path / "journal.jsonl"
    procs = {}

    def spawn(worker: str, offset: float) -> None:
        procs[worker] = spawn_worker(
            emulators,
            names,
            worker,
            journal,
            PYTHONPATH=path,
            TEST_WALL_CLOCK_OFFSET_SECONDS=str(offset),
        )

    produced: list[str] = []

    def produce(tag: str) -> None:
        records = put_records(kinesis_client, names.stream, [f"{tag}{i}".encode() for i in range(40)])
        produced.extend(r["SequenceNumber"] for r in records)

    def delivered() -> list[str]:
        return [e["q"] for e in read_journal(journal) if e["k"] == "d"]

    def balanced(workers: set[str], what: str) -> None:
        wait_until(lambda: _fair(dynamodb_client, names.lease_table, workers), timeout=FAIR_WITHIN, what=what)

    def handed_over(leaving: str) -> None:
        """SIGTERM ``leaving``: each of its leases goes to another worker in one epoch step (a transfer; a
        release and a new assignment would take two)."""
        before = {k: e for k, (o, e) in _owners(dynamodb_client, names.lease_table).items() if o == leaving}
        assert before, f"{leaving} held nothing to hand over"
        assert stop_process(procs.pop(leaving), signal.SIGTERM) == 0
        after = _owners(dynamodb_client, names.lease_table)
        assert {k: (after[k][0] != leaving and after[k][0] is not None, after[k][1]) for k in before} == {
            k: (True, e + 1) for k, e in before.items()
        }

    try:
        for worker, offset in (("ahead", 90.0), ("exact", 0.0), ("behind", -90.0)):
            spawn(worker, offset)
        produce("a")
        balanced({"ahead", "exact", "behind"}, "fair shares among three skewed workers")
        spawn("later", 45.0)
        produce("b")
        balanced({"ahead", "exact", "behind", "later"}, "fair shares after a fourth joined")
        leader = _leader(dynamodb_client, names.lease_table)
        assert leader in procs
        handed_over(leader)  # whoever leads
        produce("c")
        balanced(set(procs), "fair shares after the leader left")
        other = next(
            w
            for w in ("behind", "ahead", "exact", "later")
            if w in procs and w != _leader(dynamodb_client, names.lease_table)
        )
        handed_over(other)
        produce("d")
        balanced(set(procs), "fair shares after a follower left")
        wait_until(lambda: set(delivered()) >= set(produced), timeout=30, what="every record delivered")
    finally:
        for proc in procs.values():
            stop_process(proc)
    counts = Counter(delivered())
    assert set(counts) == set(produced)  # nothing lost
    assert [q for q, n in counts.items() if n > 1] == []  # nothing twice across planned transitions
