"""The coordination bill at the repository seam: the in-memory lease repository and checkpoint store, each call
charged to a ``Ledger`` for the DynamoDB request(s) its DynamoDB twin sends, on the sizes of the items they
touch as DynamoDB stores them (:func:`stored_item`), before and after. tests/integration/
test_coordination_contract.py holds these bills to those the proxy's meter (``metering.py``) reads off the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from consumer.checkpoint.store import CheckpointItem
from consumer.dynamo import to_item
from consumer.errors import CheckpointRejectedError, LeaseConflictError, WorkerFencedError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import LEADER_KEY, Leader, Lease, WorkerItem, lease_key
from consumer.leases.progress import ShardLag
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.records import Position
from tools.coordination.billing import Ledger, item_size, page_read_units, read_units

__all__ = ["MeteredTables", "stored_item"]

PAGE_BYTES = 1024 * 1024  # a Scan page stops after reading 1 MB
_REFUSED = (LeaseConflictError, WorkerFencedError, CheckpointRejectedError)  # a failed condition: billed
_LATER = ("heartbeat_ms", "progress", "expect", "drain_requested")  # attributes later updates add or remove
_T = TypeVar("_T")
_P = ParamSpec("_P")

Stored = Lease | WorkerItem | Leader | CheckpointItem | None
Ref = tuple[str, Callable[[], Stored]]  # (table, the item as it is stored now)
Progress = Mapping[tuple[str, str], ShardLag] | None


def stored_item(value: Stored) -> dict[str, Any] | None:
    """The DynamoDB item (wire form) the DynamoDB backends keep for a lease, worker, leader or checkpoint."""
    match value:
        case None:
            return None
        case Lease():
            lease = {**vars(value), "state": value.state.value, "parents": list(value.parents)}
            return to_item({"lease_key": value.key, "item_type": "lease", **lease})
        case WorkerItem():
            later = {name: getattr(value, name) or None for name in _LATER}
            worker = {**vars(value), **later, "given": set(value.given) or None, "tags": None}
            return to_item(
                {"lease_key": value.key, "item_type": "worker", **worker, "streams": sorted(value.streams)}
            )
        case Leader():
            return to_item(
                {"lease_key": LEADER_KEY, "item_type": "leader", "owner": value.owner, "epoch": value.epoch}
            )
        case CheckpointItem(position=p):
            at = {} if p is None else {"sequence": p.sequence, "sub_sequence": p.sub_sequence}
            at |= {} if p is None else {"position_key": p.sort_key(), "updated_ms": value.updated_ms}
            unset = {"position": None, "updated_ms": None}  # no position yet: no updated_ms either
            return to_item(
                {"lease_key": lease_key(value.stream, value.shard_id), **vars(value), **unset, **at}
            )


_sizes: dict[int, tuple[Stored, int]] = {}  # id -> (the stored version, its size)


def _size(value: Stored) -> int:
    """The size of a stored version, measured once: the in-memory tables replace an item (frozen) on every
    write, and the simulator's leader scans the whole table every second. Holding the value keeps its id."""
    hit = _sizes.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if len(_sizes) >= 500_000:
        _sizes.clear()
    size = item_size(stored_item(value))
    _sizes[id(value)] = (value, size)
    return size


@dataclass
class MeteredTables:
    """The in-memory lease repository (every role) and checkpoint store over ``tables``, each call billed to
    ``ledger``; ``requests`` counts the DynamoDB requests made (the simulator charges each one latency)."""

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

    # -- the items a request touches, and their bills -----------------------------------------------
    def _lease(self, lease: Lease) -> Ref:
        return self.lease_table, lambda: self.tables.leases.get((lease.stream, lease.shard_id))

    def _checkpoint(self, stream: str, shard_id: str) -> Ref:
        return self.checkpoint_table, lambda: self.tables.checkpoints.get((stream, shard_id))

    def _worker(self, worker_id: str) -> Ref:
        return self.lease_table, lambda: self.tables.workers.get(worker_id)

    def _leader(self) -> Ref:
        return self.lease_table, lambda: self.tables.leader

    def _moving(self, lease: Lease, *extra: Ref) -> list[Ref]:
        """An ownership change's transaction: the lease, its checkpoint item, then ``extra``."""
        return [self._lease(lease), self._checkpoint(lease.stream, lease.shard_id), *extra]

    def _fence(self, dead: OwnerObservation | None) -> list[Ref]:
        return [] if dead is None else [self._worker(dead.worker_id)]

    def _write(self, op: str, refs: list[Ref], call: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """``call`` is one ``op`` request writing ``refs``: billed if it ran or its condition refused it."""
        with self.tables.lock:
            before = [_size(get()) for _table, get in refs]
            try:
                result = call(*args, **kw)
            except _REFUSED:  # the condition was evaluated: the units were consumed
                self._charge_writes(op, refs, before)
                raise
            self._charge_writes(op, refs, before)
            return result

    def _charge_writes(self, op: str, refs: list[Ref], before: list[int]) -> None:
        self.requests += 1
        self.ledger.charge_write(op, [(t, b, _size(get())) for (t, get), b in zip(refs, before, strict=True)])

    def _get(self, ref: Ref, consistent: bool, call: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """A GetItem of ``ref``: its size in 4 KB units (the minimum when absent), halved if eventual."""
        table, get = ref
        with self.tables.lock:
            self.requests += 1
            self.ledger.charge(table, "GetItem", read=read_units(_size(get()), consistent))
            return call(*args, **kw)

    # -- reads ----------------------------------------------------------------------------------------
    def snapshot(self, consistent: bool = True) -> TableSnapshot:
        """A Scan of the lease table: pages of up to 1 MB read, each summed and rounded once."""
        with self.tables.lock:
            items = [(x.key, _size(x)) for x in self.tables.leases.values()]
            items += [(x.key, _size(x)) for x in self.tables.workers.values()]
            items += [(LEADER_KEY, _size(self.tables.leader))] if self.tables.leader is not None else []
            pages: list[list[int]] = [[]]
            total = 0
            for _key, size in sorted(items):  # pages split in key order
                if total >= PAGE_BYTES:
                    pages.append([])
                    total = 0
                pages[-1].append(size)
                total += size
            for page in pages:
                self.requests += 1
                self.ledger.charge(self.lease_table, "Scan", read=page_read_units(page, consistent))
            return self._repo.snapshot(consistent)

    def get_leases(self, keys: tuple[str, ...]) -> tuple[Lease, ...]:
        """BatchGetItem of ``keys`` (up to 100 a request, strongly consistent): each item rounded alone."""
        with self.tables.lock:
            stored = {x.key: x for x in self.tables.leases.values()}
            for i, key in enumerate(dict.fromkeys(keys)):
                first = int(i % 100 == 0)
                self.requests += first
                units = read_units(_size(stored.get(key)), True)
                self.ledger.charge(self.lease_table, "BatchGetItem", read=units, requests=first)
            return self._repo.get_leases(keys)

    def get_worker(self, worker_id: str, consistent: bool = True) -> WorkerItem | None:
        return self._get(self._worker(worker_id), consistent, self._repo.get_worker, worker_id, consistent)

    def get_leader(self) -> Leader | None:
        return self._get(self._leader(), False, self._repo.get_leader)  # eventually consistent, as DynamoDB's

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        return self._get(self._checkpoint(stream, shard_id), True, self._store.get, stream, shard_id)

    # -- membership ---------------------------------------------------------------------------------
    def register_worker(self, worker: WorkerItem) -> None:
        self._write("PutItem", [self._worker(worker.worker_id)], self._repo.register_worker, worker)

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: Progress = None,
        gone: frozenset[str] = frozenset(),
    ) -> int:
        args = (worker_id, generation, lease_count, draining, progress, gone)
        return self._write("UpdateItem", [self._worker(worker_id)], self._repo.heartbeat, *args)

    def ack_given(self, worker_id: str, keys: frozenset[str]) -> None:
        self._write("UpdateItem", [self._worker(worker_id)], self._repo.ack_given, worker_id, keys)

    def deregister_worker(self, worker_id: str) -> None:
        self._write("DeleteItem", [self._worker(worker_id)], self._repo.deregister_worker, worker_id)

    def wake(self, worker_id: str) -> None:
        self._write("UpdateItem", [self._worker(worker_id)], self._repo.wake, worker_id)

    def forget_worker(self, worker: WorkerItem) -> None:
        self._write("DeleteItem", [self._worker(worker.worker_id)], self._repo.forget_worker, worker)

    # -- leadership ---------------------------------------------------------------------------------
    def claim_leader(self, seen: Leader | None, me: str, dead: OwnerObservation | None) -> Leader:
        refs = [self._leader(), *self._fence(dead)]
        return self._write("TransactWriteItems", refs, self._repo.claim_leader, seen, me, dead)

    def resign_leader(self, leader: Leader) -> None:
        self._write("UpdateItem", [self._leader()], self._repo.resign_leader, leader)

    # -- the lease table ----------------------------------------------------------------------------
    def create_lease(self, lease: Lease) -> bool:
        return self._write("PutItem", [self._lease(lease)], self._repo.create_lease, lease)

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        """Own an unowned or dead owner's lease (the contract tests stage ownership with it)."""
        refs = self._moving(lease, *self._fence(dead_owner))
        return self._write("TransactWriteItems", refs, self._repo.take, lease, new_owner, dead_owner)

    def assign(self, lease: Lease, to_worker: str, dead_owner: OwnerObservation | None) -> Lease:
        refs = self._moving(lease, *self._fence(dead_owner), self._worker(to_worker))
        return self._write("TransactWriteItems", refs, self._repo.assign, lease, to_worker, dead_owner)

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        refs = self._moving(lease, self._worker(to_worker))
        return self._write("TransactWriteItems", refs, self._repo.transfer, lease, to_worker)

    def release(self, lease: Lease, given_up: bool = False) -> Lease:
        return self._write("TransactWriteItems", self._moving(lease), self._repo.release, lease, given_up)

    def release_all(self, leases: Sequence[Lease]) -> tuple[Lease, ...]:
        if not leases:
            return self._repo.release_all(leases)
        refs = [ref for lease in leases for ref in self._moving(lease)]
        return self._write("TransactWriteItems", refs, self._repo.release_all, leases)

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        if lease.owner is None:  # refused before any request, as the DynamoDB backend does
            return self._repo.request_handoff(lease, requester, now_ms)
        refs = [self._lease(lease), self._worker(lease.owner), self._worker(requester)]
        return self._write("TransactWriteItems", refs, self._repo.request_handoff, lease, requester, now_ms)

    def clear_handoff(self, lease: Lease) -> Lease:
        return self._write("UpdateItem", [self._lease(lease)], self._repo.clear_handoff, lease)

    def mark_ended(self, lease: Lease) -> Lease:
        return self._write("UpdateItem", [self._lease(lease)], self._repo.mark_ended, lease)

    def mark_halted(self, lease: Lease, position: str, now_ms: int) -> Lease:
        ref = self._lease(lease)
        return self._write("UpdateItem", [ref], self._repo.mark_halted, lease, position, now_ms)

    def delete_lease(self, lease: Lease) -> None:
        self._write("TransactWriteItems", self._moving(lease), self._repo.delete_lease, lease)

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        ref = self._checkpoint(stream, shard_id)
        self._write("UpdateItem", [ref], self._store.save, stream, shard_id, epoch, position)

    # -- admin --------------------------------------------------------------------------------------
    def request_drain(self, worker_id: str) -> None:
        self._write("UpdateItem", [self._worker(worker_id)], self._repo.request_drain, worker_id)

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        return self._taken_away(lease, self._repo.reset_checkpoint, lease, position)

    def restart_lease(self, seen: Lease, fresh: Lease) -> Lease:
        return self._taken_away(seen, self._repo.restart_lease, seen, fresh)

    def _taken_away(self, lease: Lease, call: Callable[_P, Lease], *args: _P.args, **kw: _P.kwargs) -> Lease:
        """The transaction, then (when the lease had an owner) an update waking it, billed even when the
        owner is gone (its condition refuses it): DynamoDB's backend sends the two apart."""
        with self.tables.lock:
            owner = [] if lease.owner is None else [self._worker(lease.owner)]
            woken = [_size(get()) for _table, get in owner]
            refs = self._moving(lease)
            new = self._write("TransactWriteItems", refs, call, *args, **kw)
            if owner:
                self._charge_writes("UpdateItem", owner, woken)
            return new
