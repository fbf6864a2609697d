"""The emulator keeps DynamoDB's promise: each conditional write and each transaction is atomic.

Six threads, each with its own boto3 client and no client-side retries, race the same write for 320 trials (racing writes):
raw conditional writes, the project's own lease take, and its cooperative transfer racing an expiry take
(``consumer.leases.dynamodb.DynamoDBLeaseRepository``). Every trial must have exactly one winner, every loser
a condition failure (nothing else: no HTTP 500), and the items intact afterwards: lease owner and epoch, the
checkpoint item's epoch following the lease's, and every worker's inbox bumped exactly once per transfer it
won.

On moto's threaded server as it comes (``EMULATORS_MOTO_SERIALIZE=none``), this fails: a failing transaction
restores a copy of the tables over the winner's writes, so trials end with two winners, lost checkpoint items
or mismatched epochs (docs/emulators.md).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

from consumer.dynamo import create_tables, from_item, to_item
from consumer.errors import LeaseConflictError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease, WorkerItem, worker_key
from consumer.leases.repository import OwnerObservation

pytestmark = pytest.mark.integration

THREADS = 6
# Two races per conditional trial: 200 + 60 + 60 = 320 racing trials in all. On the threaded server, from 19%
# (2026-11-23) to 68% (2026-11-27) of the take trials broke, and 51-81% of the transfer ones: 60 of each miss
# that with a chance under 1 in 100,000. A raw conditional write broke far less often (1 in 100 to 1 in 7).
CONDITIONAL_TRIALS = 100
TAKE_TRIALS = 60
TRANSFER_TRIALS = 60
WON, LOST = "won", "lost"


@dataclass
class Race:
    """A pool of THREADS racers, each with its own client; ``run`` starts them together at a barrier."""

    clients: list[Any]
    lease_table: str
    checkpoint_table: str
    anomalies: list[str] = field(default_factory=list)
    trials: int = 0

    def __post_init__(self) -> None:
        self.pool = ThreadPoolExecutor(THREADS, thread_name_prefix="racer")
        self.repos = [
            DynamoDBLeaseRepository(c, self.lease_table, self.checkpoint_table) for c in self.clients
        ]

    def run(self, attempt: Callable[[int], object]) -> list[str]:
        """Each racer i calls ``attempt(i)`` at once; returns "won", "lost" or the unexpected error, per racer."""
        barrier = threading.Barrier(THREADS)

        def one(i: int) -> str:
            barrier.wait(timeout=30)
            try:
                attempt(i)
            except LeaseConflictError:
                return LOST
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code", "")
                return LOST if code == "ConditionalCheckFailedException" else f"error {code}: {exc}"
            except Exception as exc:  # an emulator that breaks answers with anything; report it
                return f"error {exc!r}"
            return WON

        self.trials += 1
        return list(self.pool.map(one, range(THREADS)))

    def check(self, what: str, outcomes: list[str], problems: list[str]) -> int | None:
        """Record the trial's anomalies; the index of its single winner, if it had exactly one."""
        winners = [i for i, o in enumerate(outcomes) if o == WON]
        errors = sorted({o for o in outcomes if o not in (WON, LOST)})
        if len(winners) != 1:
            problems.append(f"{len(winners)} winners")
        problems.extend(errors)
        if problems:
            self.anomalies.append(f"{what}: {'; '.join(problems)}")
        return winners[0] if len(winners) == 1 else None

    def item(self, table: str, key: str) -> dict[str, Any] | None:
        out = self.clients[0].get_item(TableName=table, Key=to_item({"lease_key": key}), ConsistentRead=True)
        return from_item(out["Item"]) if "Item" in out else None

    def ownership_problems(self, lease: Lease, owner: str | None, epoch: int) -> list[str]:
        """The lease has this owner and epoch, and its checkpoint item exists with the same epoch."""
        problems: list[str] = []
        item = self.item(self.lease_table, lease.key)
        if item is None:
            return ["lease item missing"]
        if item.get("owner") != owner or int(item.get("epoch", -1)) != epoch:
            problems.append(
                f"lease owner/epoch {item.get('owner')}/{item.get('epoch')}, want {owner}/{epoch}"
            )
        checkpoint = self.item(self.checkpoint_table, lease.key)
        if checkpoint is None:
            problems.append("checkpoint item missing")
        elif int(checkpoint.get("epoch", -1)) != epoch or checkpoint.get("shard_id") != lease.shard_id:
            problems.append(f"checkpoint epoch {checkpoint.get('epoch')}, want {epoch}")
        return problems


@pytest.fixture
def race(emulators: Any, boto_session: Any, unique_name: Callable[..., str]) -> Iterator[Race]:
    clients = [
        emulators.client("dynamodb", session=boto_session, retries={"mode": "standard", "max_attempts": 1})
        for _ in range(THREADS)
    ]
    lease_table, checkpoint_table = unique_name("leases"), unique_name("cps")
    create_tables(clients[0], lease_table, checkpoint_table)
    race = Race(clients, lease_table, checkpoint_table)
    yield race
    race.pool.shutdown(wait=True)


def test_conditional_writes_have_one_winner(race: Race) -> None:
    client = race.clients
    for trial in range(CONDITIONAL_TRIALS):
        key = to_item({"lease_key": f"item#{trial}"})

        def create(i: int, key: dict[str, Any] = key) -> None:
            client[i].put_item(
                TableName=race.lease_table,
                Item={**key, "by": {"S": f"w{i}"}, "n": {"N": "0"}},
                ConditionExpression="attribute_not_exists(lease_key)",
            )

        created = race.check(f"create #{trial}", race.run(create), [])

        def bump(i: int, key: dict[str, Any] = key) -> None:
            client[i].update_item(
                TableName=race.lease_table,
                Key=key,
                UpdateExpression="SET n = n + :one, bumped_by = :me",
                ConditionExpression="n = :zero",
                ExpressionAttributeValues={":one": {"N": "1"}, ":zero": {"N": "0"}, ":me": {"S": f"w{i}"}},
            )

        bumped = race.check(f"bump #{trial}", race.run(bump), [])
        item = race.item(race.lease_table, f"item#{trial}")
        want = {"by": f"w{created}", "n": 1, "bumped_by": f"w{bumped}"}
        if item is None or {k: item.get(k) for k in want} != want:
            race.anomalies.append(f"item #{trial}: {item}, want {want}")
    assert race.trials == 2 * CONDITIONAL_TRIALS
    assert not race.anomalies, f"{len(race.anomalies)} of {race.trials} trials broke: {race.anomalies[:10]}"


def test_lease_take_has_one_winner_and_intact_items(race: Race) -> None:
    for trial in range(TAKE_TRIALS):
        lease = Lease(stream="orders", shard_id=f"shardId-{trial:012d}")
        assert race.repos[0].create_lease(lease)
        outcomes = race.run(lambda i, lease=lease: race.repos[i].take(lease, f"w{i}", None))
        problems: list[str] = []
        winner = race.check(f"take #{trial}", outcomes, problems)
        if winner is not None:
            problems = race.ownership_problems(lease, f"w{winner}", 1)
            if problems:
                race.anomalies.append(f"take #{trial}: {'; '.join(problems)}")
    assert race.trials == TAKE_TRIALS
    assert not race.anomalies, f"{len(race.anomalies)} of {race.trials} trials broke: {race.anomalies[:10]}"


def test_transfer_racing_expiry_takes_has_one_winner_and_intact_items(race: Race) -> None:
    """Half the racers transfer the lease from its owner, half take it as expired (fencing the owner)."""
    repo = race.repos[0]
    for i in range(THREADS):
        repo.register_worker(WorkerItem(worker_id=f"w{i}"))
    transfers_won: Counter[str] = Counter()
    for trial in range(TRANSFER_TRIALS):
        owner = f"owner{trial}"
        repo.register_worker(WorkerItem(worker_id=owner))
        free = Lease(stream="orders", shard_id=f"shardId-{trial:012d}")
        assert repo.create_lease(free)
        lease = repo.take(free, owner, None)
        seen = OwnerObservation(owner, heartbeat=0)

        def attempt(i: int, lease: Lease = lease, seen: OwnerObservation = seen) -> None:
            if i % 2 == 0:
                race.repos[i].transfer(lease, f"w{i}")
            else:
                race.repos[i].take(lease, f"w{i}", seen)

        problems: list[str] = []
        winner = race.check(f"transfer/take #{trial}", race.run(attempt), problems)
        if winner is None:
            continue
        if winner % 2 == 0:
            transfers_won[f"w{winner}"] += 1
        problems = race.ownership_problems(lease, f"w{winner}", 2)
        fenced = race.item(race.lease_table, worker_key(owner)) or {}
        if int(fenced.get("generation", -1)) != winner % 2:
            problems.append(f"owner generation {fenced.get('generation')}, want {winner % 2}")
        if problems:
            race.anomalies.append(f"transfer/take #{trial}: {'; '.join(problems)}")
    for i in range(THREADS):
        inbox = int((race.item(race.lease_table, worker_key(f"w{i}")) or {}).get("inbox", -1))
        if inbox != transfers_won[f"w{i}"]:
            race.anomalies.append(f"w{i} inbox {inbox}, won {transfers_won[f'w{i}']} transfers")
    assert race.trials == TRANSFER_TRIALS
    assert not race.anomalies, (
        f"{len(race.anomalies)} anomalies in {race.trials} trials: {race.anomalies[:10]}"
    )
