"""What the fleet is doing, per shard and per worker, as the lease table and Kinesis tell it.

Shard states: ``running``; ``handing over`` (a successor asked, ``handoff_to``); ``halted`` (the owner
stopped before a poison record: ``halted_at``, ``halted_since``); ``owner dead`` (owned by a worker that is
dead or gone: it is taken once the lease expires); ``released`` (no owner, not ended); ``ended``.
Worker states: ``alive``, ``draining``, ``dead`` (heartbeat older than the lease duration).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.checkpoint.store import CheckpointStore
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import LeaseRepository
from consumer.records import Position

__all__ = ["FleetStatus", "LeaseStatus", "WorkerStatus", "fleet_status", "iso"]


def iso(ms: int | None) -> str | None:
    """Wall time in milliseconds as ISO-8601 UTC (seconds precision)."""
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class LeaseStatus:
    stream: str
    shard_id: str
    state: str
    owner: str | None
    owner_state: str | None  # alive, draining, dead, gone (no worker item), None (no owner)
    epoch: int
    checkpoint: str | None
    millis_behind_latest: int | None
    lag_note: str | None  # why the lag is unknown, when it is
    owner_heartbeat_age_s: float | None  # the owner's last heartbeat (one heartbeat keeps all its leases)
    handoff_to: str | None
    halted_at: str | None
    halted_since: str | None

    @property
    def detail(self) -> str:
        if self.state == "halted":
            return f"halted at {self.halted_at} since {self.halted_since}"
        if self.state == "handing over":
            return f"handing over to {self.handoff_to}"
        if self.state == "owner dead":
            return f"owner {self.owner} is {self.owner_state}; taken once its lease expires"
        return self.state


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    state: str  # alive, draining, dead
    since: str | None  # alive/draining: started; dead: its last heartbeat (silent since)
    leases: int
    heartbeat: int
    heartbeat_age_s: float | None
    leads: bool = False  # the worker the leadership item names: it plans for the fleet


@dataclass(frozen=True)
class FleetStatus:
    generated_at: str
    lease_duration_s: float
    leases: list[LeaseStatus]
    workers: list[WorkerStatus]


def _lag(kinesis: Any, lease: Lease, checkpoint: Position | None) -> tuple[int | None, str | None]:
    """MillisBehindLatest at the checkpoint (one GetShardIterator and one GetRecords), or why unknown."""
    if lease.ended:
        return 0, None
    kwargs: dict[str, Any] = {"StreamName": lease.stream, "ShardId": lease.shard_id}
    if checkpoint is None:
        kwargs["ShardIteratorType"] = "TRIM_HORIZON"
    else:
        kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", StartingSequenceNumber=checkpoint.sequence)
    try:
        it = kinesis.get_shard_iterator(**kwargs)["ShardIterator"]
        value = kinesis.get_records(ShardIterator=it, Limit=1).get("MillisBehindLatest")
    except ClientError as exc:
        return None, f"Kinesis: {exc.response.get('Error', {}).get('Code', 'error')}"
    except BotoCoreError as exc:
        return None, f"Kinesis unreachable: {type(exc).__name__}"
    if value is None:
        return None, "Kinesis returned no MillisBehindLatest"
    return int(value), None


def _worker_state(w: WorkerItem, now_ms: int, lease_ms: float) -> tuple[str, str | None]:
    last = w.heartbeat_ms or w.started_ms
    if last and now_ms - last > lease_ms:
        return "dead", iso(last)
    if w.draining or w.drain_requested:
        return "draining", iso(w.started_ms)
    return "alive", iso(w.started_ms)


def _lease_state(lease: Lease, owner_state: str | None) -> str:
    if lease.ended:
        return "ended"
    if lease.owner is None:
        return "released"
    if lease.halted_at is not None:
        return "halted"
    if owner_state in {"dead", "gone"}:
        return "owner dead"
    if lease.handoff_to is not None:
        return "handing over"
    return "running"


def fleet_status(
    repo: LeaseRepository,
    store: CheckpointStore,
    kinesis: Any | None = None,
    *,
    lease_duration: float = 10.0,
    now_ms: int | None = None,
) -> FleetStatus:
    """Every lease and worker item. ``kinesis`` None: lag is not looked up (``lag_note`` says so)."""
    snap = repo.snapshot()
    leader = repo.get_leader()
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    lease_ms = lease_duration * 1000
    states = {w.worker_id: _worker_state(w, now_ms, lease_ms) for w in snap.workers}
    heartbeats = {w.worker_id: w.heartbeat_ms or w.started_ms for w in snap.workers}

    def age(ms: int | None) -> float | None:
        return round((now_ms - ms) / 1000, 1) if ms else None

    leases = []
    for lease in sorted(snap.leases, key=lambda x: (x.stream, x.shard_id)):
        cp = store.get(lease.stream, lease.shard_id)
        position = cp.position if cp else None
        owner_state = None if lease.owner is None else states.get(lease.owner, ("gone", None))[0]
        lag, note = (
            _lag(kinesis, lease, position) if kinesis is not None else (None, "not looked up (--no-lag)")
        )
        leases.append(
            LeaseStatus(
                stream=lease.stream,
                shard_id=lease.shard_id,
                state=_lease_state(lease, owner_state),
                owner=lease.owner,
                owner_state=owner_state,
                epoch=lease.epoch,
                checkpoint=str(position) if position else None,
                millis_behind_latest=lag,
                lag_note=note,
                owner_heartbeat_age_s=age(heartbeats.get(lease.owner)) if lease.owner else None,
                handoff_to=lease.handoff_to,
                halted_at=lease.halted_at,
                halted_since=iso(lease.halted_since_ms),
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
        )
        for w in sorted(snap.workers, key=lambda w: w.worker_id)
    ]
    return FleetStatus(iso(now_ms) or "", lease_duration, leases, workers)
