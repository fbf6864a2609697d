"""In-memory lease repository and checkpoint store with the same conditional semantics as DynamoDB.

The tables they share are :class:`~consumer.leases.memory_tables.InMemoryTables`; the checkpoint store is
:mod:`consumer.checkpoint.memory` (both re-exported here).

tests/integration/test_repository_contract.py runs the same cases against these and the DynamoDB backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from consumer.checkpoint.memory import InMemoryCheckpointStore
from consumer.checkpoint.store import CheckpointItem
from consumer.errors import LeaseConflictError, WorkerFencedError
from consumer.leases.memory_tables import InMemoryTables
from consumer.leases.model import Leader, Lease, LeaseState, WorkerItem
from consumer.leases.progress import ShardLag, encode_progress
from consumer.leases.repository import OwnerObservation, TableSnapshot, check_release_all
from consumer.records import Position

__all__ = ["InMemoryCheckpointStore", "InMemoryLeaseRepository", "InMemoryTables"]


class InMemoryLeaseRepository:
    def __init__(self, tables: InMemoryTables) -> None:
        self.t = tables

    def _current(self, lease: Lease) -> Lease:
        cur = self.t.leases.get((lease.stream, lease.shard_id))
        if cur is None:
            raise LeaseConflictError(f"lease {lease.key} does not exist")
        return cur

    def _expect_owned(self, lease: Lease) -> Lease:
        cur = self._current(lease)
        if cur.owner != lease.owner or cur.epoch != lease.epoch:
            raise LeaseConflictError(f"lease {lease.key} changed (owner {cur.owner}, epoch {cur.epoch})")
        return cur

    def _movable(self, lease: Lease) -> Lease:
        """The stored lease, if an ownership change of ``lease`` may go ahead (DynamoDB's transaction
        conditions): unchanged since read, not ended, and its checkpoint item (if any) at the same epoch."""
        cur = self._expect_owned(lease)
        if cur.ended:
            raise LeaseConflictError(f"lease {lease.key} has ended")
        checkpoint = self.t.checkpoints.get((cur.stream, cur.shard_id))
        if checkpoint is not None and checkpoint.epoch != cur.epoch:
            raise LeaseConflictError(
                f"checkpoint of {lease.key} is at epoch {checkpoint.epoch}, the lease at {cur.epoch}"
            )
        return cur

    def _move(self, cur: Lease, owner: str | None, position: Position | None = None) -> Lease:
        """Apply an ownership change checked by ``_movable``; ``position`` (replay) also sets the checkpoint."""
        new = replace(
            cur,
            owner=owner,
            epoch=cur.epoch + 1,
            handoff_to=None,
            handoff_requested_ms=None,
            halted_at=None,
            halted_since_ms=None,
            given_up_by=None,
        )
        self.t.leases[(cur.stream, cur.shard_id)] = new
        key = (cur.stream, cur.shard_id)
        old = self.t.checkpoints.get(key)
        if position is not None:
            self.t.checkpoints[key] = CheckpointItem(
                cur.stream, cur.shard_id, new.epoch, position, self.t.clock.wall_ms()
            )
        elif old is None:
            self.t.checkpoints[key] = CheckpointItem(cur.stream, cur.shard_id, new.epoch, None)
        else:
            self.t.checkpoints[key] = replace(old, epoch=new.epoch)
        return new

    def snapshot(self, consistent: bool = True) -> TableSnapshot:
        with self.t.lock:
            self.t.calls["Scan"] += 1
            return TableSnapshot(tuple(self.t.leases.values()), tuple(self.t.workers.values()))

    def get_worker(self, worker_id: str, consistent: bool = True) -> WorkerItem | None:
        with self.t.lock:
            self.t.calls["GetItem"] += 1
            return self.t.workers.get(worker_id)

    def get_leases(self, keys: tuple[str, ...]) -> tuple[Lease, ...]:
        with self.t.lock:
            self.t.calls["BatchGetItem"] += 1
            wanted = set(keys)
            return tuple(x for x in self.t.leases.values() if x.key in wanted)

    def get_leader(self) -> Leader | None:
        with self.t.lock:
            self.t.calls["GetItem"] += 1
            return self.t.leader

    def claim_leader(self, seen: Leader | None, me: str, dead: OwnerObservation | None) -> Leader:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            if self.t.leader != seen:
                raise LeaseConflictError(f"leadership moved on: {self.t.leader}")
            if dead is not None:
                self._fence_dead(dead)
            self.t.leader = Leader(me, (seen.epoch if seen else 0) + 1)
            return self.t.leader

    def resign_leader(self, leader: Leader) -> None:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            if self.t.leader != leader:
                raise LeaseConflictError(f"leadership moved on: {self.t.leader}")
            self.t.leader = Leader(None, leader.epoch + 1)

    def wake(self, worker_id: str) -> None:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            self._wake(worker_id)

    def ack_given(self, worker_id: str, keys: frozenset[str]) -> None:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self.t.workers.get(worker_id)
            if cur is None:
                raise LeaseConflictError(f"worker {worker_id} is not registered")
            self.t.workers[worker_id] = replace(cur, given=cur.given - keys)

    def _fence_dead(self, dead: OwnerObservation) -> None:
        """Check that ``dead`` is still as observed, and fence its item (part of a transaction)."""
        worker = self.t.workers.get(dead.worker_id)
        seen = None if worker is None else worker.heartbeat
        if seen != dead.heartbeat or (worker is not None and worker.incarnation != dead.incarnation):
            raise LeaseConflictError(f"owner {dead.worker_id} heartbeat moved")
        if worker is not None:
            self.t.workers[worker.worker_id] = replace(worker, generation=worker.generation + 1)

    def _wake(
        self, worker_id: str, *, taking: bool = False, given: str | None = None, expect: bool = False
    ) -> None:
        target = self.t.workers.get(worker_id)
        if target is None or (taking and target.draining):
            raise LeaseConflictError(f"worker {worker_id} is not registered, or is draining")
        extra = frozenset({given}) if given is not None else frozenset()
        self.t.workers[worker_id] = replace(
            target, inbox=target.inbox + 1, given=target.given | extra, expect=target.expect + expect
        )

    def create_lease(self, lease: Lease) -> bool:
        with self.t.lock:
            self.t.calls["PutItem"] += 1
            if (lease.stream, lease.shard_id) in self.t.leases:
                return False
            # Only the creation fields, like the DynamoDB item: an ownership begins with a take.
            self.t.leases[(lease.stream, lease.shard_id)] = Lease(
                lease.stream,
                lease.shard_id,
                epoch=lease.epoch,
                state=lease.state,
                parents=lease.parents,
                skipped=lease.skipped,
                first_sequence=lease.first_sequence,
                latest_ms=lease.latest_ms,
            )
            return True

    def register_worker(self, worker: WorkerItem) -> None:
        with self.t.lock:
            self.t.calls["PutItem"] += 1
            if worker.worker_id in self.t.workers:
                raise LeaseConflictError(f"worker {worker.worker_id} is already registered")
            # Counters and flags start at zero whatever the caller passed, like the DynamoDB item.
            self.t.workers[worker.worker_id] = WorkerItem(
                worker.worker_id,
                started_ms=worker.started_ms,
                streams=worker.streams,
                incarnation=worker.incarnation,
                lease_duration_ms=worker.lease_duration_ms,
            )

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: Mapping[tuple[str, str], ShardLag] | None = None,
        gone: frozenset[str] = frozenset(),
    ) -> int:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self.t.workers.get(worker_id)
            if cur is None or cur.generation != generation:
                raise WorkerFencedError(f"worker {worker_id} generation moved past {generation}")
            new = replace(
                cur,
                heartbeat=cur.heartbeat + 1,
                lease_count=lease_count,
                draining=draining,
                heartbeat_ms=self.t.clock.wall_ms(),
                progress=cur.progress if progress is None else encode_progress(progress),
                gone_streams=gone,
            )
            self.t.workers[worker_id] = new
            return new.heartbeat

    def deregister_worker(self, worker_id: str) -> None:
        with self.t.lock:
            self.t.calls["DeleteItem"] += 1
            self.t.workers.pop(worker_id, None)

    def forget_worker(self, worker: WorkerItem) -> None:
        with self.t.lock:
            self.t.calls["DeleteItem"] += 1
            cur = self.t.workers.get(worker.worker_id)
            if cur is None or (cur.heartbeat, cur.generation, cur.incarnation) != (
                worker.heartbeat,
                worker.generation,
                worker.incarnation,
            ):
                raise LeaseConflictError(f"worker {worker.worker_id} moved or is gone")
            del self.t.workers[worker.worker_id]

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        """Own an unowned lease, or a dead owner's (its heartbeat still as observed; its generation bumped):
        ``assign`` without the inbox. No worker calls it (the leader assigns); the contract tests and the
        emulators' isolation proof set up and race ownership with it."""
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            return self._take(lease, new_owner, dead_owner)

    def _take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        cur = self._movable(lease)
        if dead_owner is not None:
            self._fence_dead(dead_owner)
        return self._move(cur, new_owner)

    def assign(self, lease: Lease, to_worker: str, dead_owner: OwnerObservation | None) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            before = dict(self.t.workers)
            self._movable(lease)
            try:
                self._wake(to_worker, taking=True, given=lease.key)
                return self._take(lease, to_worker, dead_owner)
            except LeaseConflictError:
                self.t.workers = before  # all or nothing, like the transaction
                raise

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            cur = self._movable(lease)
            self._wake(to_worker, taking=True, given=lease.key)
            return self._move(cur, to_worker)

    def release(self, lease: Lease, given_up: bool = False) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            cur = self._movable(lease)
            new = replace(self._move(cur, None), given_up_by=cur.owner if given_up else None)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            return new

    def release_all(self, leases: Sequence[Lease]) -> tuple[Lease, ...]:
        check_release_all(leases)
        with self.t.lock:
            if not leases:
                return ()
            self.t.calls["TransactWriteItems"] += 1
            current = [self._movable(lease) for lease in leases]  # every condition first: all or none
            return tuple(self._move(cur, None) for cur in current)

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            cur = self._expect_owned(lease)
            if cur.handoff_to is not None or cur.owner is None:
                raise LeaseConflictError(f"lease {lease.key} already has a hand-off request or no owner")
            before = dict(self.t.workers)
            try:
                self._wake(cur.owner)
                self._wake(requester, taking=True, expect=True)
            except LeaseConflictError:
                self.t.workers = before
                raise
            new = replace(cur, handoff_to=requester, handoff_requested_ms=now_ms)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            return new

    def clear_handoff(self, lease: Lease) -> Lease:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self._expect_owned(lease)
            new = replace(cur, handoff_to=None, handoff_requested_ms=None)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            return new

    def mark_ended(self, lease: Lease) -> Lease:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self._expect_owned(lease)
            new = replace(cur, state=LeaseState.ENDED, handoff_to=None, handoff_requested_ms=None)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            return new

    def mark_halted(self, lease: Lease, position: str, now_ms: int) -> Lease:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self._expect_owned(lease)
            new = replace(cur, halted_at=position, halted_since_ms=now_ms)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            return new

    def delete_lease(self, lease: Lease) -> None:
        with self.t.lock:
            self.t.calls["DeleteItem"] += 2  # one per table, as DynamoDB counts it
            self.t.leases.pop((lease.stream, lease.shard_id), None)
            self.t.checkpoints.pop((lease.stream, lease.shard_id), None)

    def request_drain(self, worker_id: str) -> None:
        with self.t.lock:
            self.t.calls["UpdateItem"] += 1
            cur = self.t.workers.get(worker_id)
            if cur is None:
                raise LeaseConflictError(f"worker {worker_id} is not registered")
            self.t.workers[worker_id] = replace(cur, drain_requested=True, inbox=cur.inbox + 1)

    def restart_lease(self, seen: Lease, fresh: Lease) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            cur = self._expect_owned(seen)
            new = cur.restarted_as(fresh)
            self.t.leases[(cur.stream, cur.shard_id)] = new
            self.t.checkpoints[(cur.stream, cur.shard_id)] = CheckpointItem(
                cur.stream, cur.shard_id, new.epoch, None
            )
            if seen.owner is not None and seen.owner in self.t.workers:
                self._wake(seen.owner)  # so that it drops the lease now
            return new

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        with self.t.lock:
            self.t.calls["TransactWriteItems"] += 1
            new = self._move(self._movable(lease), None, position)
            if lease.owner is not None and lease.owner in self.t.workers:
                self._wake(lease.owner)  # so that it drops the lease now
            return new
