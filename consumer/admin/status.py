"""What the fleet is doing, per shard and per worker, as the lease and checkpoint tables tell it.

Shard states: ``running``; ``handing over`` (a successor asked, ``handoff_to``); ``halted`` (the owner
stopped before a poison record: ``halted_at``, ``halted_since``); ``owner dead`` (owned by a worker that is
dead or gone: it is taken once the lease expires); ``waiting`` (no owner: a child of a reshard whose parent
has not ended yet, ``waiting_for``; the leader assigns it once every parent has, as ``ready_leases`` rules);
``released`` (no owner, not ended, not waiting); ``not consumed`` (no owner or a dead one, not ended, and no
alive worker lists its stream: nobody will assign it, see ``_consumed``); ``stream gone`` (not ended nor halted,
of a stream the leader's discovery found gone: assigned to nobody until it exists again, see ``_gone``);
``ended``.
Worker states: ``alive``, ``draining``, ``dead`` (heartbeat older than the lease duration).

Lag is what each shard's owner last read: the ``MillisBehindLatest`` of its last fetch and the last sequence
number it read, published with its heartbeat (consumer/leases/progress.py). A status makes no Kinesis call:
a scan of each table (one page per MB of items) and one read of the leadership item.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

from consumer.admin.checkpoint_reads import Checkpoints, scanned_checkpoints, stored_checkpoints
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import ShardLag, decode_progress
from consumer.leases.repository import LeaseRepository

__all__ = [
    "Checkpoints",
    "FleetStatus",
    "LeaseStatus",
    "WorkerStatus",
    "fleet_status",
    "iso",
    "scanned_checkpoints",
    "stored_checkpoints",
    "worker_state",
]

logger = logging.getLogger(__name__)


def iso(ms: int | None) -> str | None:
    """Wall time in milliseconds as ISO-8601 UTC (seconds precision)."""
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# The states shown with what they wait for (``LeaseStatus.detail``); any other is shown as it is.
_DETAILS = {
    "halted": "halted at {halted_at} since {halted_since}",
    "handing over": "handing over to {handoff_to}",
    "owner dead": "owner {owner} is {owner_state}; taken once its lease expires",
    "waiting": "waiting for {waiting}",
    "not consumed": "not consumed: no alive worker lists stream {stream}",
    "stream gone": "stream gone: Kinesis says {stream} does not exist; assigned to nobody",
}


@dataclass(frozen=True)
class LeaseStatus:
    """One shard as ``status`` shows it."""

    stream: str
    shard_id: str
    state: str
    owner: str | None
    owner_state: str | None  # alive, draining, dead, gone (no worker item), None (no owner)
    epoch: int
    checkpoint: str | None
    millis_behind_latest: int | None  # as its owner last read it; None: unknown (``lag_note`` says why)
    # Why the lag is unknown, when it is: no owner, owner gone, halted, not published, stale.
    lag_note: str | None
    owner_heartbeat_age_s: float | None  # the owner's last heartbeat (one heartbeat keeps all its leases)
    handoff_to: str | None
    halted_at: str | None
    halted_since: str | None
    lag_age_s: float | None = None  # how old the owner's observation is (also when stale)
    lag_observed_at: str | None = None  # when the owner observed it (its wall clock)
    last_sequence: str | None = None  # the last sequence number the owner read (or started after)
    parents: tuple[str, ...] = ()  # the shards it was split or merged from (a reshard's child)
    waiting_for: tuple[str, ...] = ()  # ``waiting``: its parents that have a lease and have not ended

    @property
    def detail(self) -> str:
        """The state, with what it waits for."""
        fields = {**asdict(self), "waiting": ", ".join(self.waiting_for)}
        return _DETAILS.get(self.state, "{state}").format(**fields)


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as ``status`` shows it."""

    worker_id: str
    state: str  # alive, draining, dead
    since: str | None  # alive/draining: started; dead: its last heartbeat (silent since)
    leases: int
    heartbeat: int
    heartbeat_age_s: float | None
    leads: bool = False  # the worker the leadership item names: it plans for the fleet
    progress_bytes: int = 0  # the size of the progress it publishes with its heartbeat


@dataclass(frozen=True)
class FleetStatus:
    """Every shard and worker, read at ``generated_at``."""

    generated_at: str
    lease_duration_s: float
    leases: list[LeaseStatus]
    workers: list[WorkerStatus]
    gone_streams: tuple[str, ...] = ()  # the streams the leader's discovery found gone (``stream gone``)


@dataclass(frozen=True)
class _Lag:
    millis: int | None = None
    note: str | None = None
    age_s: float | None = None
    observed_at: str | None = None
    last_sequence: str | None = None


def _unread(lease: Lease, owner: WorkerItem | None) -> _Lag | None:
    """The lag of a shard nobody reads (ended, no owner, halted), or None when its owner reads it."""
    if lease.ended:
        return _Lag(millis=0)
    if lease.owner is None or owner is None:
        return _Lag(note="no owner" if lease.owner is None else "owner gone")
    if lease.halted_at is not None:  # its owner keeps the lease and reads nothing: the lag only grows
        return _Lag(note="halted: not read until an operator acts")
    return None


def _lag(
    lease: Lease,
    owner: WorkerItem | None,
    published: Mapping[tuple[str, str], ShardLag],
    now_ms: int,
    stale_ms: float,
) -> _Lag:
    """The lag its owner published for the shard, and how old it is; or why it is not known."""
    if (unread := _unread(lease, owner)) is not None:
        return unread
    assert owner is not None  # _unread answers for a lease without a live owner item
    seen = published.get((lease.stream, lease.shard_id))
    if seen is None or not owner.heartbeat_ms:
        return _Lag(note="not published by its owner yet")
    observed_ms = owner.heartbeat_ms - seen.age_ms  # both from the owner's clock
    age_s = round(max(0, now_ms - observed_ms) / 1000, 1)
    known = _Lag(
        millis=seen.millis_behind_latest,
        age_s=age_s,
        observed_at=iso(observed_ms),
        last_sequence=seen.last_sequence,
    )
    if now_ms - observed_ms > stale_ms:  # its owner is dead, or has not fetched for a lease duration
        return replace(known, millis=None, note=f"stale (observed {age_s:g}s ago)")
    if seen.millis_behind_latest is None:
        return replace(known, note="the owner's fetches carry no MillisBehindLatest")
    return known


def worker_state(w: WorkerItem, now_ms: int, lease_ms: float) -> tuple[str, str | None]:
    """How ``status`` judges a worker at ``now_ms`` (wall clock) with a lease duration of ``lease_ms``:
    ``alive``, ``draining`` or ``dead`` (no heartbeat for the longer of ``lease_ms`` and its own lease
    duration), and since when (its start; a dead one's last heartbeat)."""
    last = w.heartbeat_ms or w.started_ms
    # A worker that publishes a longer lease duration beats less often: dead only once its own has run out.
    if last and now_ms - last > w.silence_allowed(lease_ms / 1000) * 1000:
        return "dead", iso(last)
    if w.draining or w.drain_requested:
        return "draining", iso(w.started_ms)
    return "alive", iso(w.started_ms)


def _waiting_for(lease: Lease, by_shard: Mapping[tuple[str, str], Lease]) -> tuple[str, ...]:
    """The parents of ``lease`` that hold it back: those with a lease that has not ended (the rule of
    ``consumer.leases.planner.ready_leases``: a parent ended or gone lets its children be assigned)."""
    if lease.ended:
        return ()
    parents = (by_shard.get((lease.stream, p)) for p in lease.parents)
    return tuple(p.shard_id for p in parents if p is not None and not p.ended)


def _consumed(workers: Sequence[WorkerItem], states: Mapping[str, str]) -> frozenset[str] | None:
    """The streams that the alive workers (``states``: worker id -> state) list, whose unowned leases the
    leader assigns (it gives a stream's leases only to workers that list it, never to a draining or dead one).
    None when unknown: no worker is alive (a fleet stopped or not started yet: which streams it will consume
    is not in the table), or an alive worker's item lists no stream (an older version that did not publish
    its streams)."""
    alive = [w for w in workers if states.get(w.worker_id) == "alive"]
    if not alive or any(not w.streams for w in alive):
        return None
    return frozenset(stream for w in alive for stream in w.streams)


def _gone(items: Mapping[str, WorkerItem], leader: str | None, states: Mapping[str, str]) -> frozenset[str]:
    """The streams the leader's discovery found gone, as its heartbeat publishes them (empty: none, or no
    leader that is alive or draining to tell; a leader of a version that does not publish them tells none)."""
    item = items.get(leader) if leader is not None else None
    if item is None or states.get(item.worker_id) not in {"alive", "draining"}:
        return frozenset()
    return item.gone_streams


def _unowned_state(lease: Lease, waiting_for: tuple[str, ...], consumed: frozenset[str] | None) -> str:
    """The state of a lease nobody owns that has not ended: whether (and when) the leader assigns it."""
    if consumed is not None and lease.stream not in consumed:  # nobody will assign it
        return "not consumed"
    return "waiting" if waiting_for else "released"


def _lease_state(
    lease: Lease,
    owner_state: str | None,
    waiting_for: tuple[str, ...] = (),
    consumed: frozenset[str] | None = None,
    gone: frozenset[str] = frozenset(),
) -> str:
    """The state ``status`` shows; ``consumed``: the streams some alive worker lists (None: unknown);
    ``gone``: the streams the leader found gone."""
    if lease.ended:
        return "skipped" if lease.skipped else "ended"
    if lease.stream in gone and lease.halted_at is None:  # an owner's reads fail; nobody is given it
        return "stream gone"
    if lease.owner is None:
        return _unowned_state(lease, waiting_for, consumed)
    return _owned_state(lease, owner_state, consumed)


def _owned_state(lease: Lease, owner_state: str | None, consumed: frozenset[str] | None) -> str:
    """The state of a lease that has an owner and has not ended."""
    if lease.halted_at is not None:
        return "halted"
    if owner_state in {"dead", "gone"}:  # taken once its lease expires, by a worker that lists its stream
        return "not consumed" if consumed is not None and lease.stream not in consumed else "owner dead"
    if lease.handoff_to is not None:
        return "handing over"
    return "running"


def fleet_status(
    repo: LeaseRepository,
    checkpoints: Checkpoints,
    *,
    lease_duration: float = 10.0,
    now_ms: int | None = None,
) -> FleetStatus:
    """Every lease and worker item, with each shard's lag as its owner published it (a lag observed more
    than ``lease_duration`` ago is shown stale). DynamoDB reads only: the lease table's scan, the leadership
    item and ``checkpoints``."""
    snap = repo.snapshot()
    leader = repo.get_leader()
    leases = sorted(snap.leases, key=lambda x: (x.stream, x.shard_id))
    positions = checkpoints(leases)
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    lease_ms = lease_duration * 1000
    items = {w.worker_id: w for w in snap.workers}
    states = {w.worker_id: worker_state(w, now_ms, lease_ms) for w in snap.workers}
    heartbeats = {w.worker_id: w.heartbeat_ms or w.started_ms for w in snap.workers}
    published = {w.worker_id: decode_progress(w.progress) for w in snap.workers}
    state_of = {w: state for w, (state, _) in states.items()}
    consumed = _consumed(snap.workers, state_of)
    gone = _gone(items, leader.owner if leader else None, state_of)

    def age(ms: int | None) -> float | None:
        return round((now_ms - ms) / 1000, 1) if ms else None

    by_shard = {(x.stream, x.shard_id): x for x in leases}
    out = []
    for lease in leases:
        waiting_for = _waiting_for(lease, by_shard)
        position = positions.get((lease.stream, lease.shard_id))
        owner_state = None if lease.owner is None else states.get(lease.owner, ("gone", None))[0]
        owner = items.get(lease.owner) if lease.owner else None
        lag = _lag(lease, owner, published.get(lease.owner or "", {}), now_ms, lease_ms)
        out.append(
            LeaseStatus(
                stream=lease.stream,
                shard_id=lease.shard_id,
                state=_lease_state(lease, owner_state, waiting_for, consumed, gone),
                owner=lease.owner,
                owner_state=owner_state,
                epoch=lease.epoch,
                checkpoint=str(position) if position else None,
                millis_behind_latest=lag.millis,
                lag_note=lag.note,
                owner_heartbeat_age_s=age(heartbeats.get(lease.owner)) if lease.owner else None,
                handoff_to=lease.handoff_to,
                halted_at=lease.halted_at,
                halted_since=iso(lease.halted_since_ms),
                lag_age_s=lag.age_s,
                lag_observed_at=lag.observed_at,
                last_sequence=lag.last_sequence,
                parents=lease.parents,
                waiting_for=waiting_for,
            )
        )
    counts = {w: sum(1 for x in snap.leases if x.owner == w and not x.ended) for w in states}
    workers = [
        WorkerStatus(
            worker_id=w.worker_id,
            state=states[w.worker_id][0],
            since=states[w.worker_id][1],
            leases=counts[w.worker_id],
            heartbeat=w.heartbeat,
            heartbeat_age_s=age(heartbeats[w.worker_id]),
            leads=leader is not None and leader.owner == w.worker_id,
            progress_bytes=len(w.progress),
        )
        for w in sorted(snap.workers, key=lambda w: w.worker_id)
    ]
    return FleetStatus(iso(now_ms) or "", lease_duration, out, workers, tuple(sorted(gone)))
