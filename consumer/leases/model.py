"""Lease and worker items as stored in the lease table (see docs/protocol.md for the schema)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

__all__ = [
    "LEADER_KEY",
    "Leader",
    "Lease",
    "LeaseState",
    "WorkerItem",
    "lease_key",
    "new_incarnation",
    "stream_of",
    "worker_key",
]

#: The key of the one item that says which worker plans for the fleet (docs/protocol.md, "Leadership").
LEADER_KEY = "leader"


class LeaseState(enum.Enum):
    ACTIVE = "ACTIVE"  # being consumed (or waiting for its parents / an owner)
    ENDED = "ENDED"  # SHARD_END was checkpointed; children may start


def lease_key(stream: str, shard_id: str) -> str:
    return f"shard#{stream}#{shard_id}"


def stream_of(key: str) -> str:
    """The stream of a lease key (``lease_key``; stream names hold no ``#``)."""
    return key.split("#", 2)[1]


def worker_key(worker_id: str) -> str:
    return f"worker#{worker_id}"


@dataclass(frozen=True)
class Lease:
    """One shard of one stream. ``epoch`` increases exactly when ``owner`` changes (never on renewal)."""

    stream: str
    shard_id: str
    owner: str | None = None
    epoch: int = 0
    state: LeaseState = LeaseState.ACTIVE
    parents: tuple[str, ...] = ()
    handoff_to: str | None = None  # a worker that asked the owner for this lease
    handoff_requested_ms: int | None = None  # wall time of the request, for the stall metric only
    halted_at: str | None = (
        None  # the owner halted the shard before this position ("seq/sub"); operators only
    )
    halted_since_ms: int | None = None  # wall time the owner halted it; operators only
    given_up_by: str | None = None  # the worker that last released it after giving up (others go first)
    # Created ENDED without being read: under LATEST, a shard already closed when the application first
    # listed it, with no parent it reads (consumer/retrieval/discovery.py). Its children start at LATEST.
    skipped: bool = False
    # The StartingSequenceNumber of the shard it was created for (None: created by an earlier version, or by
    # import-kcl). A listed shard of this id that starts elsewhere belongs to a stream created again under the
    # same name: discovery starts the lease afresh (``DiscoveryRepository.restart_lease``).
    first_sequence: str | None = None
    # Under LATEST, the wall time (ms) discovery created it at: a shard with no checkpoint is read from then
    # (AT_TIMESTAMP) by every owner, so a take-over before the first checkpoint skips nothing (None: created
    # by an earlier version, or under another initial position, or a child that continues its parents).
    latest_ms: int | None = None

    @property
    def key(self) -> str:
        return lease_key(self.stream, self.shard_id)

    @property
    def ended(self) -> bool:
        return self.state is LeaseState.ENDED

    def restarted_as(self, fresh: Lease) -> Lease:
        """This lease started afresh (``DiscoveryRepository.restart_lease``): ``fresh``'s creation fields, no
        owner and nothing of an ownership, at the next epoch."""
        return Lease(
            self.stream,
            self.shard_id,
            epoch=self.epoch + 1,
            state=fresh.state,
            parents=fresh.parents,
            skipped=fresh.skipped,
            first_sequence=fresh.first_sequence,
            latest_ms=fresh.latest_ms,
        )


def new_incarnation() -> str:
    """A fresh incarnation id for a registration (random; never compared for order)."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class WorkerItem:
    """A live worker's membership item. Its ``heartbeat`` counter keeps every lease it owns alive.

    ``generation`` is bumped by any worker that takes one of this worker's leases after expiry, which fails
    this worker's next (conditional) heartbeat; ``inbox`` is bumped to wake it (hand-off asked or given).
    ``incarnation`` is chosen anew at every registration: a worker forgotten and registered again under the
    same id restarts its counter, and (incarnation, heartbeat) tells the two apart where the counter alone
    could repeat a value an observer last saw.
    """

    worker_id: str
    heartbeat: int = 0
    generation: int = 0
    inbox: int = 0
    draining: bool = False
    lease_count: int = 0
    started_ms: int = 0
    heartbeat_ms: int = 0  # wall time of the last heartbeat: for operators only, never for decisions
    drain_requested: bool = False  # set by the operator's drain command
    given: frozenset[str] = frozenset()  # keys of leases given to this worker that it has not yet read
    expect: int = 0  # bumped when the leader asks an owner to hand this worker a lease: poll fast
    streams: frozenset[str] = frozenset()  # the streams it consumes (the leader gives it only these)
    tags: dict[str, str] = field(default_factory=dict, compare=False)
    incarnation: str = ""  # chosen at registration; "" for items written before incarnations existed
    # The lease duration it runs with (0: not published, an older version). Whoever judges it dead waits at
    # least this long, so a worker started with a longer lease than the leader's is not taken from.
    lease_duration_ms: int = 0
    # What it last read of each shard it owns, published with its heartbeat (consumer/leases/progress.py);
    # for ``status`` only, never for decisions.
    progress: bytes = field(default=b"", compare=False, repr=False)
    # A leader's: the streams its discovery found gone, whose leases it assigns to nobody; for ``status`` only.
    gone_streams: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return worker_key(self.worker_id)

    def silence_allowed(self, ours: float) -> float:
        """Seconds its heartbeat may stand still before a judge whose lease duration is ``ours`` counts it
        dead: the longer of ``ours`` and its own (a worker started with a longer lease beats less often)."""
        return max(ours, self.lease_duration_ms / 1000)


@dataclass(frozen=True)
class Leader:
    """The leadership item: ``owner`` plans for the fleet while its worker heartbeat moves.

    ``epoch`` increases whenever ``owner`` changes, as for a lease; a claim from a dead leader fences the
    dead leader's worker item (its generation), exactly like a take of a dead owner's lease.
    """

    owner: str | None = None
    epoch: int = 0
