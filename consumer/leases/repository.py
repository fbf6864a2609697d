"""The lease repository seam: every state change is one conditional write (or one transaction)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from consumer.leases.model import Lease, WorkerItem
from consumer.records import Position

__all__ = ["LeaseRepository", "OwnerObservation", "TableSnapshot"]


@dataclass(frozen=True)
class TableSnapshot:
    leases: tuple[Lease, ...]
    workers: tuple[WorkerItem, ...]


@dataclass(frozen=True)
class OwnerObservation:
    """What a taker saw of a dead owner: its heartbeat counter (``None``: its worker item was absent)."""

    worker_id: str
    heartbeat: int | None


class LeaseRepository(Protocol):
    """Lease-table I/O. Methods raise ``LeaseConflictError`` when their condition does not hold.

    Transfers and takes also move the checkpoint item's epoch in the same transaction, so a checkpoint
    write by the previous owner fails from that instant on.
    """

    def snapshot(self) -> TableSnapshot:
        """Every lease and worker item (strongly consistent)."""
        ...

    def get_worker(self, worker_id: str) -> WorkerItem | None: ...

    def create_lease(self, lease: Lease) -> bool:
        """Create the lease if absent; return whether this call created it."""
        ...

    def register_worker(self, worker: WorkerItem) -> None: ...

    def heartbeat(self, worker_id: str, generation: int, lease_count: int, draining: bool) -> int:
        """Bump our heartbeat if our generation is still ``generation``; raise ``WorkerFencedError`` if not."""
        ...

    def deregister_worker(self, worker_id: str) -> None: ...

    def forget_worker(self, worker: WorkerItem) -> None:
        """Delete a dead worker's item if its heartbeat and generation are still as seen (conflict if not)."""
        ...

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        """Own an unowned lease, or a dead owner's (its heartbeat still as observed; its generation bumped)."""
        ...

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        """Hand an owned lease to ``to_worker`` in one write that bumps the epoch, and wake the successor
        (a conflict if the successor is not registered or is draining)."""
        ...

    def release(self, lease: Lease) -> Lease:
        """Give up an owned lease (owner removed, epoch bumped)."""
        ...

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        """Ask the living owner for the lease, and wake it."""
        ...

    def clear_handoff(self, lease: Lease) -> Lease:
        """Decline a hand-off request (the owner is at or below its fair share, or the requester left)."""
        ...

    def mark_ended(self, lease: Lease) -> Lease:
        """Record that the owner checkpointed SHARD_END; the owner lets go of it."""
        ...

    def mark_halted(self, lease: Lease, position: str, now_ms: int) -> Lease:
        """Record, for operators, that the owner halted the shard before ``position`` (kept until it moves)."""
        ...

    def delete_lease(self, lease: Lease) -> None:
        """Retire an ended lease whose shard no longer exists."""
        ...

    def request_drain(self, worker_id: str) -> None:
        """Ask a worker to hand its leases away and exit (operator command)."""
        ...

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        """Operator replay: take the lease from its owner (epoch bump, owner removed) and set the checkpoint
        to ``position`` in the same transaction, so the old owner's next checkpoint is refused."""
        ...
