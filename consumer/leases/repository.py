"""The lease repository seams, one small Protocol per role over the one lease table: membership (worker
items), leadership (the leader item), the lease table (leases and their ownership) and admin (operator
commands); ``LeaseRepository`` is all four. Every state change is one conditional write (or transaction).
Both implementations (``memory.InMemoryLeaseRepository``, ``dynamodb.DynamoDBLeaseRepository``) play every
role and are held to the same contract tests (tests/integration/test_*_contract.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from consumer.leases.model import Leader, Lease, WorkerItem
from consumer.leases.progress import ShardLag
from consumer.records import Position

__all__ = [
    "RELEASE_ALL_MAX",
    "AdminRepository",
    "DiscoveryRepository",
    "LeadershipRepository",
    "LeaseRepository",
    "LeaseTableRepository",
    "MembershipRepository",
    "OwnerObservation",
    "TableSnapshot",
    "check_release_all",
]


# The most leases one ``release_all`` takes: TransactWriteItems holds at most 100 actions, two per lease (the
# lease and its checkpoint's epoch).
RELEASE_ALL_MAX = 50


def check_release_all(leases: Sequence[Lease]) -> None:
    """What DynamoDB would refuse of a ``release_all`` (too many, or one lease twice), refused before any write."""
    if len(leases) > RELEASE_ALL_MAX:
        raise ValueError(f"release_all takes at most {RELEASE_ALL_MAX} leases, got {len(leases)}")
    if len({lease.key for lease in leases}) != len(leases):
        raise ValueError("release_all was given a lease twice")


@dataclass(frozen=True)
class TableSnapshot:
    """Every lease and worker item, as one read of the table saw them."""

    leases: tuple[Lease, ...]
    workers: tuple[WorkerItem, ...]


@dataclass(frozen=True)
class OwnerObservation:
    """What a taker saw of a dead owner: its heartbeat counter (``None``: its worker item was absent) and the
    incarnation that counter belongs to; a fence holds only while both are still as seen."""

    worker_id: str
    heartbeat: int | None
    incarnation: str = ""


class MembershipRepository(Protocol):
    """Worker items: a worker joins, beats, reads and empties its inbox, and leaves; the leader wakes a
    worker and forgets a dead one. A condition that does not hold raises ``LeaseConflictError``; a fenced
    heartbeat, ``WorkerFencedError``."""

    def get_worker(self, worker_id: str, consistent: bool = True) -> WorkerItem | None:
        """A worker's item (None: not registered); ``consistent``: a strongly consistent read."""
        ...

    def register_worker(self, worker: WorkerItem) -> None:
        """Join the fleet: create our item, counters at zero (a conflict if the id is registered already)."""
        ...

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: Mapping[tuple[str, str], ShardLag] | None = None,
        gone: frozenset[str] = frozenset(),
    ) -> int:
        """Bump our heartbeat if our generation is still ``generation``; raise ``WorkerFencedError`` if not.

        ``progress``: what we last read of each shard, ``{(stream, shard_id): ShardLag}``, stored in the same
        write (replacing what was there; empty removes it); ``None`` leaves the stored one as it is.
        ``gone``: while we lead, the streams our discovery found gone (``WorkerItem.gone_streams``, for
        ``status``), stored in the same write; empty removes them."""
        ...

    def ack_given(self, worker_id: str, keys: frozenset[str]) -> None:
        """Remove ``keys`` from our ``given`` set once we have read those leases."""
        ...

    def deregister_worker(self, worker_id: str) -> None:
        """Leave the fleet: delete our item (nothing to do if it is already gone)."""
        ...

    def wake(self, worker_id: str) -> None:
        """Bump a registered worker's inbox (a conflict if it is not registered)."""
        ...

    def forget_worker(self, worker: WorkerItem) -> None:
        """Delete a dead worker's item if its heartbeat and generation are still as seen (conflict if not)."""
        ...


class LeadershipRepository(Protocol):
    """The one leadership item: read, claimed (fencing a dead leader), resigned. A claim that loses raises
    ``LeaseConflictError``."""

    def get_leader(self) -> Leader | None:
        """The leadership item, eventually consistent (None: nobody ever led)."""
        ...

    def claim_leader(self, seen: Leader | None, me: str, dead: OwnerObservation | None) -> Leader:
        """Lead if the item is still as ``seen`` (absent, unowned, or owned by ``dead.worker_id`` whose
        heartbeat is still ``dead.heartbeat``, which this write then fences)."""
        ...

    def resign_leader(self, leader: Leader) -> None:
        """Stop leading (owner removed, epoch bumped) if the item is still ``leader``."""
        ...


class LeaseTableRepository(Protocol):
    """The leases: read, and every change of ownership. Each change is one conditional write (or transaction),
    raising ``LeaseConflictError`` when its condition does not hold; assignments and transfers also move the
    checkpoint item's epoch in the same transaction, so a checkpoint write by the previous owner fails from
    that instant on."""

    def snapshot(self, consistent: bool = True) -> TableSnapshot:
        """Every lease and worker item (only the leader reads the whole table, eventually consistent)."""
        ...

    def get_leases(self, keys: tuple[str, ...]) -> tuple[Lease, ...]:
        """The leases with these keys that exist (strongly consistent)."""
        ...

    def assign(self, lease: Lease, to_worker: str, dead_owner: OwnerObservation | None) -> Lease:
        """The leader gives an unowned (or dead owner's) lease to ``to_worker``: a take on its behalf that
        also adds the key to its ``given`` set and wakes it (a conflict if it is gone or draining)."""
        ...

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        """Hand an owned lease to ``to_worker`` in one write that bumps the epoch, and wake the successor
        with the key in its ``given`` set (a conflict if it is not registered or is draining)."""
        ...

    def release(self, lease: Lease, given_up: bool = False) -> Lease:
        """Give up an owned lease (owner removed, epoch bumped); ``given_up``: note that its owner failed on it,
        so that the leader offers it to another worker first."""
        ...

    def release_all(self, leases: Sequence[Lease]) -> tuple[Lease, ...]:
        """``release`` of up to ``RELEASE_ALL_MAX`` owned leases in one write, all or none: if any has moved
        on (a ``LeaseConflictError``) nothing is released (a shutdown's releases, one call instead of one
        each)."""
        ...

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        """Ask the living owner to hand the lease to ``requester``; wake both (the requester then polls fast,
        so that it starts the lease as soon as it arrives)."""
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


class DiscoveryRepository(Protocol):
    """The leases discovery writes: created for new shards, started afresh for a stream created again, retired
    once their shard is gone (``consumer.retrieval.discovery``)."""

    def create_lease(self, lease: Lease) -> bool:
        """Create the lease if absent; return whether this call created it."""
        ...

    def delete_lease(self, lease: Lease) -> None:
        """Retire a lease and its checkpoint: its shard is no longer listed (aged out of the stream, or of an
        earlier stream of the same name)."""
        ...

    def restart_lease(self, seen: Lease, fresh: Lease) -> Lease:
        """A lease whose shard id now names a shard of a stream created again under the same name: in one
        transaction, if it is still as ``seen`` (owner and epoch, in any state), it takes ``fresh``'s creation
        fields (state, parents, skipped, first sequence) with no owner and the next epoch, and its checkpoint
        holds that epoch and no position (the new shard starts at the initial position). Its old owner is
        woken, as by a replay: its next checkpoint is refused."""
        ...


class AdminRepository(Protocol):
    """Operator commands: drain a worker, replay a shard from a position."""

    def request_drain(self, worker_id: str) -> None:
        """Ask a worker to hand its leases away and exit (operator command)."""
        ...

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        """Operator replay: take the lease from its owner (epoch bump, owner removed) and set the checkpoint
        to ``position`` in the same transaction, so the old owner's next checkpoint is refused."""
        ...


class LeaseRepository(
    MembershipRepository,
    LeadershipRepository,
    LeaseTableRepository,
    DiscoveryRepository,
    AdminRepository,
    Protocol,
):
    """Every role over the one lease table: what the worker's coordinator and the operator commands hold.
    Code that plays one role takes that role's Protocol."""
