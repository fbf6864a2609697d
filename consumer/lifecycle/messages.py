"""What the coordinator hears (events) and what it asks the worker shell to do (actions).

Both are plain frozen values, so the coordinator's step can be tested by comparing lists.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from consumer.leases.model import Leader, Lease, WorkerItem
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.lifecycle.processor import ShutdownReason
from consumer.records import Position

__all__ = [
    "AckGiven",
    "Action",
    "ActionResult",
    "ClaimLeadership",
    "Deregister",
    "Discover",
    "Discovered",
    "Event",
    "Forget",
    "Heartbeat",
    "HeartbeatResult",
    "InboxRead",
    "LeaderRead",
    "LeaderWatched",
    "LeadershipResult",
    "LeaseWrite",
    "Metric",
    "Outcome",
    "OwnRead",
    "ReadInbox",
    "ReadLeader",
    "ReadOwn",
    "ReadTable",
    "Reconcile",
    "Reconciled",
    "Renew",
    "ResignLeadership",
    "Result",
    "ShardFinished",
    "ShutdownRequested",
    "Start",
    "Stop",
    "TableRead",
    "Wake",
    "WatchLeader",
    "WriteKind",
]


class Outcome(enum.Enum):
    """How a shard consumer ended."""

    SHARD_END = "shard_end"  # SHARD_END checkpointed: mark the lease ENDED
    STOPPED = "stopped"  # drained and checkpointed on request: hand the lease over or release it
    LOST = "lost"  # the lease moved on: nothing more to do
    HALTED = "halted"  # a record failed every attempt under the halt policy: keep the lease, visibly
    GAVE_UP = "gave_up"  # transient failures lasted past the give-up bound: release for another worker
    FAILED = "failed"  # an unexpected error (e.g. the processor's constructor raised): release


class Result(enum.Enum):
    OK = "ok"
    CONFLICT = "conflict"  # a condition did not hold: somebody else changed the item first
    FAILED = "failed"  # transient or unknown: the coordinator decides when to retry


class WriteKind(enum.Enum):
    TRANSFER = "transfer"
    RELEASE = "release"
    END = "end"
    HALT = "halt"
    REQUEST = "request"  # the leader asks an owner to hand a lease to ``to``
    DECLINE = "decline"  # the leader withdraws a request
    ASSIGN = "assign"  # the leader gives an unowned or dead owner's lease to ``to``


# -- events ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShutdownRequested:
    pass


@dataclass(frozen=True)
class HeartbeatResult:
    sent_at: float
    result: Result
    fenced: bool = False  # our generation moved: reconcile before going on
    error: str = ""
    draining: bool = False  # the beat said we are draining (what a shutdown waits to land)


@dataclass(frozen=True)
class InboxRead:
    worker: WorkerItem | None
    error: str = ""
    final: bool = False  # the answer to a ``ReadInbox(final=True)``


@dataclass(frozen=True)
class OwnRead:
    """Our leases (and those given to us) as stored; ``asked``: the keys we read."""

    asked: tuple[str, ...]
    leases: tuple[Lease, ...] | None  # None: the read failed
    error: str = ""


@dataclass(frozen=True)
class LeaderRead:
    leader: Leader | None  # None: no leadership item (yet), or the read failed (``error``)
    error: str = ""


@dataclass(frozen=True)
class LeaderWatched:
    """The leader's worker item, read to see whether its heartbeat still moves."""

    worker_id: str
    worker: WorkerItem | None  # None: gone, or the read failed (``error``)
    error: str = ""


@dataclass(frozen=True)
class LeadershipResult:
    claim: ClaimLeadership
    result: Result
    leader: Leader | None = None  # the leadership item after a successful claim
    error: str = ""


@dataclass(frozen=True)
class TableRead:
    snapshot: TableSnapshot | None  # None: the read failed
    error: str = ""


@dataclass(frozen=True)
class Reconciled:
    worker: WorkerItem | None  # None: the read failed
    leases: tuple[Lease, ...] | None  # our leases and those given to us, as stored
    asked: tuple[str, ...] = ()  # the keys read
    error: str = ""


@dataclass(frozen=True)
class Discovered:
    changed: bool  # leases were created or retired: read the table again now
    more: bool = False  # it stopped at its limit: discover again soon
    # Streams Kinesis said do not exist (ResourceNotFoundException naming the stream), and streams it listed:
    # only these two change what the leader believes of a stream (a timeout or a throttle tells nothing).
    missing: frozenset[str] = frozenset()
    listed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ShardFinished:
    key: str
    epoch: int
    outcome: Outcome
    halted_at: Position | None = None
    detail: str = ""


@dataclass(frozen=True)
class ActionResult:
    kind: WriteKind
    lease: Lease  # the lease the write was about, as the coordinator sent it
    result: Result
    new: Lease | None = None  # the lease after a successful write
    to: str | None = None
    error: str = ""


Event = (
    ShutdownRequested
    | HeartbeatResult
    | InboxRead
    | OwnRead
    | LeaderRead
    | LeaderWatched
    | LeadershipResult
    | TableRead
    | Reconciled
    | Discovered
    | ShardFinished
    | ActionResult
)


# -- actions --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Heartbeat:
    generation: int
    lease_count: int
    draining: bool
    gone: frozenset[str] = frozenset()  # a leader's: the streams Kinesis says are gone (shown by ``status``)


@dataclass(frozen=True)
class Renew:
    """Our heartbeat sent at ``sent_at`` was written: our leases are ours until ``sent_at`` + window."""

    sent_at: float


@dataclass(frozen=True)
class ReadInbox:
    """Read our own item (eventually consistent). ``final``: a shutdown's last read, strongly consistent, made
    once its draining heartbeat landed (from then on nobody can hand us a lease): what was handed to us before
    is seen and handed on, not left to expire."""

    final: bool = False


@dataclass(frozen=True)
class ReadTable:
    pass


@dataclass(frozen=True)
class Reconcile:
    """Read our worker item (re-registering it if a live worker forgot us), then ``keys`` and the leases
    given to us."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class ReadOwn:
    """Read these leases (ours and those given to us), strongly consistent."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class AckGiven:
    """We have read these given leases: take them out of our ``given`` set."""

    keys: frozenset[str]


@dataclass(frozen=True)
class ReadLeader:
    pass


@dataclass(frozen=True)
class WatchLeader:
    worker_id: str


@dataclass(frozen=True)
class ClaimLeadership:
    seen: Leader | None  # the leadership item as read (None: absent)
    dead: OwnerObservation | None = None  # the dead leader's heartbeat, fenced by the claim


@dataclass(frozen=True)
class ResignLeadership:
    leader: Leader


@dataclass(frozen=True)
class Wake:
    """Bump another worker's inbox (a new or draining worker wakes the leader)."""

    worker_id: str


@dataclass(frozen=True)
class Discover:
    leases: tuple[Lease, ...]  # as last read: discovery creates only the leases nobody created yet
    streams: tuple[str, ...]  # every stream a live worker consumes
    limit: int = 1000  # lease-table writes at most (the rest at the next discovery)


@dataclass(frozen=True)
class Start:
    lease: Lease


@dataclass(frozen=True)
class Stop:
    key: str
    reason: ShutdownReason
    # REQUESTED: let a poll under way finish and deliver it first (a successor is about to read after it);
    # false for a release to nobody, which cuts it off: the next owner starts at the checkpoint either way.
    last_poll: bool = True


@dataclass(frozen=True)
class LeaseWrite:
    kind: WriteKind
    lease: Lease
    to: str | None = None  # TRANSFER: the successor; ASSIGN: the new owner; REQUEST: the requester
    dead_owner: OwnerObservation | None = None  # TAKE / ASSIGN of a dead owner's lease
    halted_at: Position | None = None  # HALT
    given_up: bool = False  # RELEASE after giving up: the leader offers the lease to others first


@dataclass(frozen=True)
class Forget:
    worker: WorkerItem


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    stream: str
    shard: str | None = None


@dataclass(frozen=True)
class Deregister:
    """The last action: remove our worker item; the shell then returns."""


Action = (
    Heartbeat
    | Renew
    | ReadInbox
    | ReadTable
    | Reconcile
    | ReadOwn
    | AckGiven
    | ReadLeader
    | WatchLeader
    | ClaimLeadership
    | ResignLeadership
    | Wake
    | Discover
    | Start
    | Stop
    | LeaseWrite
    | Forget
    | Metric
    | Deregister
)
