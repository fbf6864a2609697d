"""Operator actions on a running fleet: status, drain, replay. The same code against emulators or AWS."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from consumer.checkpoint.store import CheckpointStore
from consumer.errors import ConsumerError, LeaseConflictError, MissingResourceError
from consumer.leases.model import Lease
from consumer.leases.repository import LeaseRepository
from consumer.logs import log_event
from consumer.records import Position

__all__ = ["LeaseStatus", "ReplayPlan", "WorkerStatus", "drain", "fleet_status", "plan_replay", "replay"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseStatus:
    stream: str
    shard_id: str
    owner: str | None
    epoch: int
    state: str
    checkpoint: str | None
    millis_behind_latest: int | None
    owner_heartbeat_age_s: float | None  # the owner's last renewal (its heartbeat keeps all its leases)
    handoff_to: str | None


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    leases: int
    heartbeat: int
    heartbeat_age_s: float | None
    draining: bool


def _lag(kinesis: Any, lease: Lease, checkpoint: Position | None) -> int | None:
    """MillisBehindLatest as seen from the checkpoint (one GetShardIterator and one GetRecords)."""
    if lease.ended:
        return 0
    try:
        if checkpoint is None:
            it = kinesis.get_shard_iterator(
                StreamName=lease.stream, ShardId=lease.shard_id, ShardIteratorType="TRIM_HORIZON"
            )
        else:
            it = kinesis.get_shard_iterator(
                StreamName=lease.stream,
                ShardId=lease.shard_id,
                ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                StartingSequenceNumber=checkpoint.sequence,
            )
        out = kinesis.get_records(ShardIterator=it["ShardIterator"], Limit=1)
        value = out.get("MillisBehindLatest")
        return int(value) if value is not None else None
    except ClientError:
        return None


def fleet_status(
    repo: LeaseRepository, store: CheckpointStore, kinesis: Any | None = None, now_ms: int | None = None
) -> tuple[list[LeaseStatus], list[WorkerStatus]]:
    snap = repo.snapshot()
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    workers = {w.worker_id: w for w in snap.workers}

    def age(ms: int) -> float | None:
        return round((now_ms - ms) / 1000, 1) if ms else None

    leases = []
    for lease in sorted(snap.leases, key=lambda x: (x.stream, x.shard_id)):
        cp = store.get(lease.stream, lease.shard_id)
        position = cp.position if cp else None
        owner = workers.get(lease.owner) if lease.owner else None
        leases.append(
            LeaseStatus(
                stream=lease.stream,
                shard_id=lease.shard_id,
                owner=lease.owner,
                epoch=lease.epoch,
                state=lease.state.value,
                checkpoint=str(position) if position else None,
                millis_behind_latest=_lag(kinesis, lease, position) if kinesis is not None else None,
                owner_heartbeat_age_s=age(owner.heartbeat_ms) if owner else None,
                handoff_to=lease.handoff_to,
            )
        )
    counts = {w: sum(1 for x in snap.leases if x.owner == w and not x.ended) for w in workers}
    return leases, [
        WorkerStatus(w.worker_id, counts[w.worker_id], w.heartbeat, age(w.heartbeat_ms), w.draining)
        for w in sorted(workers.values(), key=lambda w: w.worker_id)
    ]


def drain(repo: LeaseRepository, worker_id: str) -> None:
    if repo.get_worker(worker_id) is None:
        raise MissingResourceError(f"no live worker {worker_id!r} (see the status command for the fleet)")
    repo.request_drain(worker_id)
    log_event(logger, "drain_requested_by_operator", worker=worker_id)


@dataclass(frozen=True)
class ReplayPlan:
    lease: Lease
    old_checkpoint: Position | None
    new_checkpoint: Position  # records after this position are delivered again


def _first_at(kinesis: Any, stream: str, shard_id: str, at: datetime) -> str | None:
    it = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="AT_TIMESTAMP", Timestamp=at
    )["ShardIterator"]
    for _ in range(100):
        out = kinesis.get_records(ShardIterator=it, Limit=1)
        if out["Records"]:
            return str(out["Records"][0]["SequenceNumber"])
        it = out.get("NextShardIterator")
        if it is None or out.get("MillisBehindLatest") == 0:
            return None
    return None


def plan_replay(
    repo: LeaseRepository,
    store: CheckpointStore,
    kinesis: Any,
    stream: str,
    shard_id: str | None,
    *,
    timestamp: datetime | None = None,
    sequence: str | None = None,
    checkpoint: Position | None = None,
) -> list[ReplayPlan]:
    """Where each targeted shard would restart. Raises naming an unknown stream or shard."""
    snap = repo.snapshot()
    leases = [x for x in snap.leases if x.stream == stream]
    if not leases:
        raise MissingResourceError(f"unknown stream {stream!r}: no leases for it in the lease table")
    if shard_id is not None:
        leases = [x for x in leases if x.shard_id == shard_id]
        if not leases:
            raise MissingResourceError(f"unknown shard {shard_id!r} of stream {stream!r}")
    plans = []
    for lease in sorted(leases, key=lambda x: x.shard_id):
        if lease.ended:
            if shard_id is not None:
                raise ConsumerError(f"{stream}/{lease.shard_id} has ended; its children carry on from it")
            continue
        cp = store.get(stream, lease.shard_id)
        if checkpoint is not None:
            target: Position | None = checkpoint
        elif sequence is not None:
            target = Position(sequence, -1)  # just before the sequence: it is delivered again
        else:
            assert timestamp is not None
            first = _first_at(kinesis, stream, lease.shard_id, timestamp)
            target = Position(first, -1) if first else None
        if target is None:
            log_event(
                logger, "replay_skipped", stream=stream, shard=lease.shard_id, reason="no records after time"
            )
            continue
        plans.append(ReplayPlan(lease, cp.position if cp else None, target))
    return plans


def replay(repo: LeaseRepository, plans: list[ReplayPlan]) -> list[str]:
    """Apply the plans; log each old checkpoint with the command that restores it. Returns undo commands."""
    undo = []
    for p in plans:
        try:
            repo.reset_checkpoint(p.lease, p.new_checkpoint)
        except LeaseConflictError as exc:
            raise ConsumerError(f"{p.lease.key} changed while replaying; run the command again") from exc
        old = p.old_checkpoint
        restore = (
            f"python -m consumer replay --stream {p.lease.stream} --shard {p.lease.shard_id} "
            f"--checkpoint {old.sequence}/{old.sub_sequence} --yes"
            if old
            else "(no checkpoint before: TRIM_HORIZON)"
        )
        log_event(
            logger,
            "checkpoint_replayed",
            logging.WARNING,
            stream=p.lease.stream,
            shard=p.lease.shard_id,
            old_checkpoint=str(old) if old else None,
            new_checkpoint=str(p.new_checkpoint),
            old_owner=p.lease.owner,
            undo=restore,
        )
        undo.append(restore)
    return undo
