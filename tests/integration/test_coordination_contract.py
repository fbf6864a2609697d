"""The coordination bill at the repository seam is DynamoDB's: the same repository and checkpoint calls, made
by the DynamoDB backends against moto over HTTP (every request billed off the wire by the fault proxy's meter)
and by the metered in-memory backends of the simulator (``tools.coordination.metered``), give the same
requests, read units and write units per table and operation, refused conditions and transactions included."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from consumer.checkpoint.dynamodb import DynamoDBCheckpointStore
from consumer.checkpoint.store import CheckpointStore
from consumer.dynamo import create_tables
from consumer.errors import CheckpointRejectedError, LeaseConflictError, WorkerFencedError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import ShardLag
from consumer.leases.repository import OwnerObservation
from consumer.records import Position
from tools.coordination.billing import Ledger
from tools.coordination.metered import MeteredTables
from tools.coordination.metering import DynamoDBMeter
from tools.emulators import AwsEndpoints
from tools.tcp_proxy import FaultProxy

pytestmark = pytest.mark.integration

STREAM = "contract-stream-of-some-length"
Bill = dict[tuple[str, str], tuple[int, float, float]]


def _refused(call: Callable[[], Any]) -> str:
    try:
        call()
    except (LeaseConflictError, WorkerFencedError, CheckpointRejectedError) as exc:
        return type(exc).__name__
    return "done"


def _script(repo: Any, store: CheckpointStore) -> list[Any]:
    """Every repository role's calls, granted and refused; returns what each refusable call did."""
    seen: list[Any] = []
    digits = random.Random(7)  # sequence numbers that do not compress: a progress blob over 1 KB
    big = {
        (STREAM, f"shardId-{i:012d}"): ShardLag(1000 + i, f"{digits.getrandbits(180):056d}", 5)
        for i in range(60)
    }
    for w in ("w-one", "w-two"):
        repo.register_worker(WorkerItem(w, started_ms=1_764_000_000_123, streams=frozenset({STREAM})))
    seen.append(_refused(lambda: repo.register_worker(WorkerItem("w-one"))))
    repo.heartbeat("w-one", 0, 0, False, big)  # a worker item over 1 KB: two write units
    repo.heartbeat("w-two", 0, 0, False, {})
    seen.append(_refused(lambda: repo.heartbeat("w-two", 7, 0, False)))
    leases = [Lease(STREAM, f"shardId-{i:012d}", parents=("shardId-x",) * i) for i in range(3)]
    seen += [repo.create_lease(x) for x in leases] + [repo.create_lease(leases[0])]
    repo.snapshot(consistent=False)
    a = repo.assign(leases[0], "w-one", None)
    seen.append(_refused(lambda: repo.assign(leases[0], "w-two", None)))
    b = repo.assign(leases[1], "w-two", None)
    repo.get_leases((a.key, b.key, leases[2].key, "shard#nothing#here"))
    repo.get_worker("w-one")
    repo.get_worker("w-nobody", consistent=False)
    repo.ack_given("w-one", frozenset({a.key}))
    store.get(STREAM, a.shard_id)
    store.get(STREAM, "shardId-absent")
    store.save(STREAM, a.shard_id, a.epoch, Position("4" * 56, 3))
    seen.append(_refused(lambda: store.save(STREAM, a.shard_id, a.epoch - 1, Position("5" * 56))))
    seen.append(_refused(lambda: store.save(STREAM, a.shard_id, a.epoch, Position("1"))))
    a = repo.request_handoff(a, "w-two", 1_764_000_000_456)
    seen.append(_refused(lambda: repo.request_handoff(a, "w-two", 1_764_000_000_789)))
    a = repo.clear_handoff(a)
    a = repo.transfer(a, "w-two")
    b = repo.mark_halted(b, "12/0", 1_764_000_001_000)
    seen.append(_refused(lambda: repo.mark_halted(leases[1], "12/0", 1_764_000_001_000)))
    b = repo.release(b, given_up=True)
    leader = repo.claim_leader(None, "w-one", None)
    seen.append(_refused(lambda: repo.claim_leader(None, "w-two", None)))
    repo.get_leader()
    repo.resign_leader(leader)
    seen.append(_refused(lambda: repo.resign_leader(leader)))
    repo.wake("w-two")
    seen.append(_refused(lambda: repo.wake("w-nobody")))
    c = repo.take(leases[2], "w-two", OwnerObservation("w-gone", None))
    seen.append(_refused(lambda: repo.take(b, "w-one", OwnerObservation("w-two", 99, ""))))
    c = repo.mark_ended(c)
    repo.delete_lease(c)
    repo.request_drain("w-one")
    seen.append(_refused(lambda: repo.request_drain("w-nobody")))
    a = repo.reset_checkpoint(a, Position("2" * 56))
    seen.append(_refused(lambda: repo.forget_worker(WorkerItem("w-two", heartbeat=5))))
    repo.deregister_worker("w-one")
    repo.snapshot()
    return seen


def _bill(ledger: Ledger, roles: dict[str, str]) -> Bill:
    return {
        (roles[table], op): (t.requests, t.read_units, t.write_units)
        for (table, op), t in ledger.totals().items()
    }


def test_the_metered_repository_bills_what_dynamodb_bills_on_the_wire(
    emulators: Any, unique_name: Callable[..., str]
) -> None:
    leases, checkpoints = unique_name("leases"), unique_name("cps")
    raw = emulators.client("dynamodb")
    create_tables(raw, leases, checkpoints)
    wire = Ledger(time.monotonic)
    meter = DynamoDBMeter(wire, raw)
    port = int(emulators.aws_endpoint.rsplit(":", 1)[1])
    with FaultProxy(("127.0.0.1", port), meter=meter) as proxy:
        client = AwsEndpoints(emulators.kinesis_endpoint, proxy.url()).client("dynamodb")
        real = _script(
            DynamoDBLeaseRepository(client, leases, checkpoints), DynamoDBCheckpointStore(client, checkpoints)
        )
    assert meter.errors == []

    seam = Ledger(time.monotonic)
    tables = MeteredTables(InMemoryTables(), seam, "memory-leases", "memory-cps")
    mine = _script(tables, tables)

    assert mine == real  # the same calls granted and refused
    roles = {
        leases: "leases",
        checkpoints: "checkpoints",
        "memory-leases": "leases",
        "memory-cps": "checkpoints",
    }
    theirs, ours = _bill(wire, roles), _bill(seam, roles)
    assert ours == theirs
    assert theirs[("leases", "UpdateItem")][2] > theirs[("leases", "UpdateItem")][0]  # a 2-unit heartbeat
    assert tables.requests == sum(n for n, _r, _w in ours.values())
