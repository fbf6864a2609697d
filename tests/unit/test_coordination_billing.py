"""DynamoDB billing rules and the in-memory client's bills, against AWS's documented examples and sizes
computed by hand."""

from __future__ import annotations

import math

import pytest

from consumer.errors import LeaseConflictError
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import ShardLag
from consumer.leases.repository import OwnerObservation
from tools.coordination.billing import (
    Ledger,
    dollars_per_month,
    item_size,
    number_size,
    page_read_units,
    read_units,
    write_units,
)
from tools.coordination.metered import MeteredTables, stored_item


def test_item_size_follows_the_documented_rules() -> None:
    assert item_size({"name": {"S": "héllo"}}) == 4 + 6  # UTF-8 bytes of name and value
    assert number_size("12345") == 4  # 5 significant digits: 3 bytes + 1
    assert number_size("1000") == 2  # trailing zeros trimmed
    assert number_size("0.0012") == 2  # leading zeros trimmed
    assert item_size({"n": {"N": "-1.5"}}) == 1 + 2
    assert item_size({"b": {"B": b"\x00\x01\x02"}}) == 1 + 3
    assert item_size({"b": {"B": "AAEC"}}) == 1 + 3  # base64 text (JSON wire form): raw bytes counted
    assert item_size({"t": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert item_size({"l": {"L": []}}) == 1 + 3  # an empty list: the 3-byte overhead
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "7"}]}}) == 1 + 3 + (1 + 2) + (1 + 2)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)
    assert item_size({"ss": {"SS": ["a", "bc"]}, "ns": {"NS": ["1", "22"]}}) == 2 + 3 + 2 + 2 + 2
    assert item_size(None) == 0


def test_read_and_write_units_follow_the_documented_examples() -> None:
    assert read_units(3500, consistent=True) == 1  # a 3.5 KB item: one 4 KB unit
    assert read_units(10 * 1024, consistent=True) == 3  # 10 KB: three units
    assert read_units(10 * 1024, consistent=False) == 1.5  # eventually consistent: half
    assert read_units(0, consistent=True) == 1  # a missing item still costs the minimum
    # BatchGetItem rounds each item: 1.5 KB + 6.5 KB -> 1 + 2 units, where a Query page of both -> 2.
    assert read_units(1536, True) + read_units(6656, True) == 3
    assert page_read_units([1536, 6656], consistent=True) == 2
    assert page_read_units([40] * 10, consistent=True) == 1  # ten 40-byte items: one unit
    assert write_units(3500) == 4  # a 3.5 KB item: four 1 KB units
    assert write_units(500, 1500) == 2  # the larger of before and after
    assert write_units(0) == 1
    assert dollars_per_month(1_000_000 / 730, 1_000_000 / 730) == pytest.approx(0.75)


def _tables() -> tuple[MeteredTables, Ledger]:
    ledger = Ledger(lambda: 0.0)
    return MeteredTables(InMemoryTables(), ledger, "leases", "cps"), ledger


def _units(ledger: Ledger, op: str, table: str = "leases") -> tuple[int, float, float]:
    t = ledger.totals()[(table, op)]
    return t.requests, t.read_units, t.write_units


def test_the_seam_bills_writes_by_the_larger_item_and_refused_conditions_too() -> None:
    repo, ledger = _tables()
    repo.register_worker(WorkerItem("w1", started_ms=1_764_000_000_000))
    assert _units(ledger, "PutItem") == (1, 0, 1)
    progress = {("s", f"shard-{i}"): ShardLag(i, f"{(i + 1) * 10**40 + i * 7919}", 0) for i in range(80)}
    repo.heartbeat("w1", 0, 0, False, progress)
    size = item_size(stored_item(repo.tables.workers["w1"]))
    assert size > 1024  # the progress blob makes it a 2 KB (or larger) item
    repo.heartbeat("w1", 0, 0, False, {})  # removes the blob: the item before is the larger
    assert _units(ledger, "UpdateItem") == (2, 0, 2 * math.ceil(size / 1024))
    with pytest.raises(LeaseConflictError):
        repo.register_worker(WorkerItem("w1"))
    assert _units(ledger, "PutItem") == (2, 0, 2)  # the refused write consumed a unit as well
    repo.deregister_worker("w-missing")
    assert _units(ledger, "DeleteItem") == (1, 0, 1)
    repo.get_worker("w-missing", consistent=False)
    repo.get_worker("w1")
    assert _units(ledger, "GetItem") == (2, 1.5, 0)


def test_transactions_cost_twice_and_condition_checks_count_as_writes() -> None:
    repo, ledger = _tables()
    lease = Lease("s", "shard-0")
    repo.create_lease(lease)
    # The lease, its (new) checkpoint item and the check that the dead owner's item is still absent.
    taken = repo.take(lease, "w1", OwnerObservation("w-dead", None))
    assert _units(ledger, "TransactWriteItems") == (1, 0, 4)
    assert _units(ledger, "TransactWriteItems", "cps") == (0, 0, 2)
    with pytest.raises(LeaseConflictError):
        repo.take(lease, "w2", None)  # stale: refused, every item billed all the same
    assert _units(ledger, "TransactWriteItems") == (2, 0, 6)
    assert _units(ledger, "TransactWriteItems", "cps") == (0, 0, 4)
    assert taken.owner == "w1" and repo.requests == 3


def test_a_scan_reads_the_whole_table_in_pages_of_1_mb() -> None:
    repo, ledger = _tables()
    parents = tuple(f"shardId-{i:012d}" for i in range(16))
    for i in range(3000):  # about 400 bytes a lease: 1.2 MB, two pages
        repo.create_lease(Lease("s", f"shardId-{i:012d}", parents=parents))
    repo.register_worker(WorkerItem("w1"))
    sizes = sorted(
        (x.key, item_size(stored_item(x)))
        for x in (*repo.tables.leases.values(), *repo.tables.workers.values())
    )
    first = next(n for n in range(len(sizes)) if sum(s for _k, s in sizes[:n]) >= 1024 * 1024)
    pages = [sum(s for _k, s in sizes[:first]), sum(s for _k, s in sizes[first:])]
    repo.snapshot(consistent=False)
    assert _units(ledger, "Scan") == (2, sum(math.ceil(p / 4096) for p in pages) / 2, 0)
