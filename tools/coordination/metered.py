"""The coordination bill at the repository seam: the in-memory lease repository and checkpoint store, each
call charged to a ``Ledger`` as DynamoDB bills the requests ``DynamoDBLeaseRepository`` and
``DynamoDBCheckpointStore`` make for it::

    meter = MeteredTables(InMemoryTables(clock=clock), ledger, "leases", "checkpoints")
    repo, store = meter.repository(), meter.checkpoints()

Each method names the DynamoDB operation its DynamoDB twin sends and the items that operation touches; the
units come from ``tools.coordination.billing`` on the sizes of those items as DynamoDB stores them (rendered
by :func:`stored_item`) before and after the call: a write by the larger of the two (a write refused by its
condition too), a transaction twice per item, a read by the item read (consistent or not), a Scan by 1 MB
pages of the whole lease table, leader item included. One request per request (the first item of a
transaction or a batch carries it). tests/integration/test_coordination_contract.py holds these bills to the
ones the fault proxy's meter (``metering.py``) reads off the wire from moto for the same calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from consumer.checkpoint.store import CheckpointItem
from consumer.dynamo import to_item
from consumer.errors import CheckpointRejectedError, LeaseConflictError, WorkerFencedError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import LEADER_KEY, Leader, Lease, WorkerItem, lease_key, worker_key
from consumer.leases.progress import ShardLag
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.records import Position
from tools.coordination.billing import item_size, page_read_units, read_units, write_units
from tools.coordination.ledger import Ledger

__all__ = ["MeteredCheckpointStore", "MeteredRepository", "MeteredTables", "stored_item"]

PAGE_BYTES = 1024 * 1024  # a Scan page stops after reading 1 MB
_REFUSED = (LeaseConflictError, WorkerFencedError, CheckpointRejectedError)  # a failed condition: billed
_T = TypeVar("_T")

Stored = Lease | WorkerItem | Leader | CheckpointItem | None
Ref = tuple[str, Callable[[], Stored]]  # (table, the item as it is stored now)


def stored_item(value: Stored) -> dict[str, Any] | None:
    """The DynamoDB item (wire form) the DynamoDB backends keep for a lease, worker, leader or checkpoint."""
    match value:
        case None:
            return None
        case Lease():
            return to_item(
                {
                    "lease_key": value.key,
                    "item_type": "lease",
                    "stream": value.stream,
                    "shard_id": value.shard_id,
                    "epoch": value.epoch,
                    "state": value.state.value,
                    "parents": list(value.parents),
                    "owner": value.owner,
                    "handoff_to": value.handoff_to,
                    "handoff_requested_ms": value.handoff_requested_ms,
                    "halted_at": value.halted_at,
                    "halted_since_ms": value.halted_since_ms,
                    "given_up_by": value.given_up_by,
                }
            )
        case WorkerItem():
            return to_item(
                {
                    "lease_key": value.key,
                    "item_type": "worker",
                    "worker_id": value.worker_id,
                    "heartbeat": value.heartbeat,
                    "incarnation": value.incarnation,
                    "generation": value.generation,
                    "inbox": value.inbox,
                    "draining": value.draining,
                    "lease_count": value.lease_count,
                    "started_ms": value.started_ms,
                    "streams": sorted(value.streams),
                    # Written by later updates only: absent until then (ADD starts ``expect``; an emptied
                    # set and an empty progress are removed).
                    "heartbeat_ms": value.heartbeat_ms or None,
                    "progress": value.progress or None,
                    "given": set(value.given) or None,
                    "expect": value.expect or None,
                    "drain_requested": value.drain_requested or None,
                }
            )
        case Leader():
            return to_item(
                {"lease_key": LEADER_KEY, "item_type": "leader", "owner": value.owner, "epoch": value.epoch}
            )
        case CheckpointItem():
            position = value.position
            return to_item(
                {
                    "lease_key": lease_key(value.stream, value.shard_id),
                    "epoch": value.epoch,
                    "stream": value.stream,
                    "shard_id": value.shard_id,
                    "sequence": None if position is None else position.sequence,
                    "sub_sequence": None if position is None else position.sub_sequence,
                    "position_key": None if position is None else position.sort_key(),
                    "updated_ms": None if position is None else value.updated_ms,
                }
            )


class _Sizes:
    """Item sizes, each stored version measured once: the in-memory tables replace an item on every write
    (their values are frozen), so the object names the version; the simulator's leader scans the whole
    table every second."""

    def __init__(self, limit: int = 500_000) -> None:
        self._limit = limit
        self._memo: dict[int, tuple[Stored, int]] = {}

    def __call__(self, value: Stored) -> int:
        hit = self._memo.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        size = item_size(stored_item(value))
        if len(self._memo) >= self._limit:
            self._memo.clear()
        self._memo[id(value)] = (value, size)  # holding the value keeps its id from being reused
        return size


_size = _Sizes()


@dataclass
class MeteredTables:
    """Both in-memory tables and the ledger their calls are billed to; ``requests`` counts the DynamoDB
    requests made (the simulator charges each one latency)."""

    tables: InMemoryTables
    ledger: Ledger
    lease_table: str
    checkpoint_table: str
    requests: int = 0
    _repo: InMemoryLeaseRepository = field(init=False)
    _store: InMemoryCheckpointStore = field(init=False)

    def __post_init__(self) -> None:
        self._repo = InMemoryLeaseRepository(self.tables)
        self._store = InMemoryCheckpointStore(self.tables)

    def repository(self) -> MeteredRepository:
        """A lease repository (every role) over these tables, billed."""
        return MeteredRepository(self, self._repo)

    def checkpoints(self) -> MeteredCheckpointStore:
        """A checkpoint store over these tables, billed."""
        return MeteredCheckpointStore(self, self._store)

    # -- the items a request touches: (table, the stored item as it is when called) -----------------
    def lease(self, lease: Lease) -> Ref:
        return self.lease_table, lambda: self.tables.leases.get((lease.stream, lease.shard_id))

    def checkpoint(self, lease: Lease) -> Ref:
        return self.checkpoint_table, lambda: self.tables.checkpoints.get((lease.stream, lease.shard_id))

    def worker(self, worker_id: str) -> Ref:
        return self.lease_table, lambda: self.tables.workers.get(worker_id)

    def leader(self) -> Ref:
        return self.lease_table, lambda: self.tables.leader

    # -- billing ------------------------------------------------------------------------------------
    def write(self, op: str, refs: list[Ref], call: Callable[[], _T]) -> _T:
        """``call`` is one ``op`` request writing ``refs``: billed if it ran or its condition refused it."""
        with self.tables.lock:
            before = [_size(get()) for _table, get in refs]
            billed = True
            try:
                return call()
            except _REFUSED:  # the condition was evaluated: the units were consumed
                raise
            except BaseException:
                billed = False
                raise
            finally:
                if billed:
                    self.charge_writes(op, refs, before)

    def charge_writes(self, op: str, refs: list[Ref], before: list[int]) -> None:
        """One ``op`` request that wrote ``refs``, whose sizes were ``before``."""
        self.requests += 1
        factor = 2 if op == "TransactWriteItems" else 1
        for i, ((table, get), b) in enumerate(zip(refs, before, strict=True)):
            units = factor * write_units(b, _size(get()))
            self.ledger.charge(table, op, write=units, requests=1 if i == 0 else 0)

    def read(self, ref: Ref, consistent: bool) -> None:
        """A GetItem of ``ref``: its size in 4 KB units (the minimum when absent), halved if eventual."""
        table, get = ref
        with self.tables.lock:
            self.requests += 1
            self.ledger.charge(table, "GetItem", read=read_units(_size(get()), consistent))

    def batch_read(self, keys: tuple[str, ...]) -> None:
        """BatchGetItem of ``keys`` (up to 100 a request, strongly consistent): each item rounded alone."""
        wanted = list(dict.fromkeys(keys))
        with self.tables.lock:
            stored = {x.key: x for x in self.tables.leases.values()}
            for i, key in enumerate(wanted):
                first = i % 100 == 0
                self.requests += first
                units = read_units(_size(stored.get(key)), True)
                self.ledger.charge(self.lease_table, "BatchGetItem", read=units, requests=int(first))

    def scan(self, consistent: bool) -> None:
        """A Scan of the lease table: pages of up to 1 MB read, each summed and rounded once."""
        with self.tables.lock:
            items: list[Stored] = [*self.tables.leases.values(), *self.tables.workers.values()]
            if self.tables.leader is not None:
                items.append(self.tables.leader)
            sizes = [s for _k, s in sorted((_key(x), _size(x)) for x in items)]
            pages: list[list[int]] = [[]]
            total = 0
            for size in sizes:
                if total >= PAGE_BYTES:
                    pages.append([])
                    total = 0
                pages[-1].append(size)
                total += size
            for page in pages:
                self.requests += 1
                self.ledger.charge(self.lease_table, "Scan", read=page_read_units(page, consistent))


def _key(x: Stored) -> str:
    match x:
        case WorkerItem():
            return worker_key(x.worker_id)
        case Leader():
            return LEADER_KEY
        case Lease():
            return x.key
        case _:
            raise TypeError(f"not an item of the lease table: {x!r}")


class MeteredRepository:
    """Every ``LeaseRepository`` role (and ``take``) of the in-memory repository, each call billed."""

    def __init__(self, meter: MeteredTables, inner: InMemoryLeaseRepository) -> None:
        self._m = meter
        self._r = inner

    # -- reads --------------------------------------------------------------------------------------
    def snapshot(self, consistent: bool = True) -> TableSnapshot:
        with self._m.tables.lock:
            self._m.scan(consistent)
            return self._r.snapshot(consistent)

    def get_worker(self, worker_id: str, consistent: bool = True) -> WorkerItem | None:
        with self._m.tables.lock:
            self._m.read(self._m.worker(worker_id), consistent)
            return self._r.get_worker(worker_id, consistent)

    def get_leases(self, keys: tuple[str, ...]) -> tuple[Lease, ...]:
        with self._m.tables.lock:
            self._m.batch_read(keys)
            return self._r.get_leases(keys)

    def get_leader(self) -> Leader | None:
        with self._m.tables.lock:
            self._m.read(self._m.leader(), False)  # eventually consistent, as the DynamoDB backend reads it
            return self._r.get_leader()

    # -- membership ---------------------------------------------------------------------------------
    def register_worker(self, worker: WorkerItem) -> None:
        self._m.write("PutItem", [self._m.worker(worker.worker_id)], lambda: self._r.register_worker(worker))

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: Mapping[tuple[str, str], ShardLag] | None = None,
    ) -> int:
        return self._m.write(
            "UpdateItem",
            [self._m.worker(worker_id)],
            lambda: self._r.heartbeat(worker_id, generation, lease_count, draining, progress),
        )

    def ack_given(self, worker_id: str, keys: frozenset[str]) -> None:
        self._m.write("UpdateItem", [self._m.worker(worker_id)], lambda: self._r.ack_given(worker_id, keys))

    def deregister_worker(self, worker_id: str) -> None:
        self._m.write("DeleteItem", [self._m.worker(worker_id)], lambda: self._r.deregister_worker(worker_id))

    def wake(self, worker_id: str) -> None:
        self._m.write("UpdateItem", [self._m.worker(worker_id)], lambda: self._r.wake(worker_id))

    def forget_worker(self, worker: WorkerItem) -> None:
        self._m.write("DeleteItem", [self._m.worker(worker.worker_id)], lambda: self._r.forget_worker(worker))

    # -- leadership ---------------------------------------------------------------------------------
    def claim_leader(self, seen: Leader | None, me: str, dead: OwnerObservation | None) -> Leader:
        refs = [self._m.leader(), *self._fence(dead)]
        return self._m.write("TransactWriteItems", refs, lambda: self._r.claim_leader(seen, me, dead))

    def resign_leader(self, leader: Leader) -> None:
        self._m.write("UpdateItem", [self._m.leader()], lambda: self._r.resign_leader(leader))

    # -- the lease table ----------------------------------------------------------------------------
    def _fence(self, dead: OwnerObservation | None) -> list[Ref]:
        return [] if dead is None else [self._m.worker(dead.worker_id)]

    def _moving(self, lease: Lease, *extra: Ref) -> list[Ref]:
        """An ownership change's transaction: the lease, its checkpoint item, then ``extra``."""
        return [self._m.lease(lease), self._m.checkpoint(lease), *extra]

    def create_lease(self, lease: Lease) -> bool:
        return self._m.write("PutItem", [self._m.lease(lease)], lambda: self._r.create_lease(lease))

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        """Own an unowned or dead owner's lease (the contract tests stage ownership with it)."""
        refs = self._moving(lease, *self._fence(dead_owner))
        return self._m.write("TransactWriteItems", refs, lambda: self._r.take(lease, new_owner, dead_owner))

    def assign(self, lease: Lease, to_worker: str, dead_owner: OwnerObservation | None) -> Lease:
        refs = self._moving(lease, *self._fence(dead_owner), self._m.worker(to_worker))
        return self._m.write("TransactWriteItems", refs, lambda: self._r.assign(lease, to_worker, dead_owner))

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        refs = self._moving(lease, self._m.worker(to_worker))
        return self._m.write("TransactWriteItems", refs, lambda: self._r.transfer(lease, to_worker))

    def release(self, lease: Lease, given_up: bool = False) -> Lease:
        return self._m.write(
            "TransactWriteItems", self._moving(lease), lambda: self._r.release(lease, given_up)
        )

    def release_all(self, leases: Sequence[Lease]) -> tuple[Lease, ...]:
        if not leases:
            return self._r.release_all(leases)
        refs = [ref for lease in leases for ref in self._moving(lease)]
        return self._m.write("TransactWriteItems", refs, lambda: self._r.release_all(leases))

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        if lease.owner is None:  # refused before any request, as the DynamoDB backend does
            return self._r.request_handoff(lease, requester, now_ms)
        refs = [self._m.lease(lease), self._m.worker(lease.owner), self._m.worker(requester)]
        return self._m.write(
            "TransactWriteItems", refs, lambda: self._r.request_handoff(lease, requester, now_ms)
        )

    def clear_handoff(self, lease: Lease) -> Lease:
        return self._m.write("UpdateItem", [self._m.lease(lease)], lambda: self._r.clear_handoff(lease))

    def mark_ended(self, lease: Lease) -> Lease:
        return self._m.write("UpdateItem", [self._m.lease(lease)], lambda: self._r.mark_ended(lease))

    def mark_halted(self, lease: Lease, position: str, now_ms: int) -> Lease:
        return self._m.write(
            "UpdateItem", [self._m.lease(lease)], lambda: self._r.mark_halted(lease, position, now_ms)
        )

    def delete_lease(self, lease: Lease) -> None:
        self._m.write("TransactWriteItems", self._moving(lease), lambda: self._r.delete_lease(lease))

    # -- admin --------------------------------------------------------------------------------------
    def request_drain(self, worker_id: str) -> None:
        self._m.write("UpdateItem", [self._m.worker(worker_id)], lambda: self._r.request_drain(worker_id))

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        """The transaction, then (when the lease had an owner) an update waking it, billed even when the
        owner is gone (its condition refuses it)."""
        if lease.owner is None:
            return self._m.write(
                "TransactWriteItems", self._moving(lease), lambda: self._r.reset_checkpoint(lease, position)
            )
        owner = self._m.worker(lease.owner)
        with self._m.tables.lock:
            woken = _size(owner[1]())
            # The in-memory call moves the lease and wakes the owner; DynamoDB's backend sends the two apart.
            new = self._m.write(
                "TransactWriteItems", self._moving(lease), lambda: self._r.reset_checkpoint(lease, position)
            )
            self._m.charge_writes("UpdateItem", [owner], [woken])
            return new


class MeteredCheckpointStore:
    """The in-memory checkpoint store, each call billed like ``DynamoDBCheckpointStore``'s request."""

    def __init__(self, meter: MeteredTables, inner: InMemoryCheckpointStore) -> None:
        self._m = meter
        self._s = inner

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        with self._m.tables.lock:
            ref = self._m.checkpoint(Lease(stream, shard_id))
            self._m.read(ref, True)
            return self._s.get(stream, shard_id)

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        ref = self._m.checkpoint(Lease(stream, shard_id))
        self._m.write("UpdateItem", [ref], lambda: self._s.save(stream, shard_id, epoch, position))
