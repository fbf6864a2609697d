"""The cut-over from a KCL lease table: this consumer's leases and checkpoints at the KCL's positions.

Per KCL lease, a plan: the position this consumer stores (the KCL checkpoint and its KPL sub-sequence, so the
fleet resumes with the next user record; ``SHARD_END`` as an ended lease; ``TRIM_HORIZON`` and
``AT_TIMESTAMP`` as "just before the first record there", found in Kinesis, so the result does not depend on
the fleet's initial position; ``LATEST``, a shard the KCL never started, as no checkpoint: the fleet's
initial position applies, as the KCL's would have) and what to do with it given what this consumer already
has: create, move forward, leave alone (equal, or ours is ahead: never backwards unless forced). Plans are
applied parents first. Applying twice gives the same tables. A lease that is not the live stream's (a former
stream of the same name) or whose shard is gone is left out, with why, and listed with the plans.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from consumer.admin.ops import first_sequence
from consumer.aws_errors import aws_call
from consumer.checkpoint.store import CheckpointStore
from consumer.dynamo import to_item, translate_errors
from consumer.errors import ConfigError, ConsumerError, LeaseConflictError
from consumer.kcl.lease_table import KclLease
from consumer.kcl.stream_check import LeftOut, check_streams, kcl_position
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.dynamodb_items import lease_item
from consumer.leases.model import Lease, LeaseState
from consumer.logs import log_event
from consumer.records import SHARD_END, Position

__all__ = ["Action", "ImportPlan", "LeftOut", "ShardPlan", "apply_plans", "check_streams", "plan_import"]

logger = logging.getLogger(__name__)


class Action(enum.Enum):
    """What the import does for one shard."""

    CREATE = "create"  # no lease of ours yet
    FORWARD = "move forward"  # ours is behind the KCL's (or has no position)
    BACKWARD = "move back (forced)"
    KEEP_AHEAD = "keep: ours is ahead"  # never backwards unless --force
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ShardPlan:
    """One shard: the KCL lease, the position we store (None: the fleet's initial position), ours now."""

    kcl: KclLease
    target: Position | None
    ended: bool
    lease: Lease | None
    current: Position | None
    action: Action
    note: str = ""

    def line(self) -> str:
        """The per-shard report line."""
        kcl = kcl_position(self.kcl)
        target = str(self.target) if self.target is not None else "(none: the fleet's initial position)"
        ours = str(self.current) if self.current is not None else "-"
        extra = f"; {self.note}" if self.note else ""
        owner = f", owner {self.kcl.owner}" if self.kcl.owner else ""
        return (
            f"{self.kcl.stream}/{self.kcl.shard_id}: KCL {kcl}{owner} -> {target}: {self.action.value} "
            f"(ours before: {ours}){extra}"
        )


@dataclass(frozen=True)
class ImportPlan:
    """The import's plan: one ``ShardPlan`` per imported lease (parents first), and the leases left out."""

    shards: tuple[ShardPlan, ...]
    left_out: tuple[LeftOut, ...]

    def lines(self) -> list[str]:
        """The report: each shard's line, then each left-out lease's."""
        return [plan.line() for plan in self.shards] + [out.line() for out in self.left_out]


def _parents_first(leases: list[KclLease]) -> list[KclLease]:
    by_key = {(lease.stream, lease.shard_id): lease for lease in leases}
    out: list[KclLease] = []
    seen: set[tuple[str, str]] = set()

    def visit(lease: KclLease) -> None:
        key = (lease.stream, lease.shard_id)
        if key in seen:
            return
        seen.add(key)
        for parent in lease.parents:
            if (p := by_key.get((lease.stream, parent))) is not None:
                visit(p)
        out.append(lease)

    for lease in sorted(leases, key=lambda x: (x.stream, x.shard_id)):
        visit(lease)
    return out


def _first_record(kinesis: Any, stream: str, shard: str, **iterator: Any) -> str | None:
    with aws_call("kinesis", f"read {stream}/{shard}"):
        # The KCL fleet is stopped and ours not started: the shard's 5 reads a second are the walk's.
        return first_sequence(kinesis, stream, shard, max_calls=1000, interval=0.2, **iterator)


def _just_before_first(
    kinesis: Any, kcl: KclLease, what: str, **iterator: Any
) -> tuple[Position | None, str]:
    first = _first_record(kinesis, kcl.stream, kcl.shard_id, **iterator)
    if first is None:
        return None, f"no record {what} yet: it starts at the fleet's initial position"
    return Position(first, -1), f"just before the first record {what}"


def _target(kcl: KclLease, kinesis: Any, timestamp: datetime | None) -> tuple[Position | None, str]:
    match kcl.sentinel:
        case None:
            return Position(kcl.checkpoint, kcl.sub_sequence), ""
        case "SHARD_END":
            return SHARD_END, ""
        case "LATEST":
            return None, "the KCL had not started it: it starts at the fleet's initial position"
        case "TRIM_HORIZON":
            return _just_before_first(kinesis, kcl, "at TRIM_HORIZON", ShardIteratorType="TRIM_HORIZON")
    if timestamp is None:  # AT_TIMESTAMP: the time is in the KCL's configuration, not in its table
        raise ConfigError(
            "--timestamp",
            f"is required: lease {kcl.lease_key} is at AT_TIMESTAMP (give the KCL's "
            "initialPositionInStreamExtended: epoch seconds, or ISO-8601 with a time zone)",
        )
    return _just_before_first(
        kinesis, kcl, f"at {timestamp.isoformat()}", ShardIteratorType="AT_TIMESTAMP", Timestamp=timestamp
    )


def plan_import(
    kcl_leases: list[KclLease],
    repo: DynamoDBLeaseRepository,
    store: CheckpointStore,
    kinesis: Any,
    *,
    timestamp: datetime | None = None,
    force: bool = False,
    leave_out_expired: bool = False,
) -> ImportPlan:
    """What the import would do for each KCL lease, parents first, and which leases it leaves out (nothing is
    written; ``check_streams`` first)."""
    kcl_leases, left_out = check_streams(kcl_leases, kinesis, leave_out_expired=leave_out_expired)
    ours = {(lease.stream, lease.shard_id): lease for lease in repo.snapshot().leases}
    # A lease's parents are those the application reads, as discovery names them: imported, or a lease of
    # ours that is not skipped. A parent the KCL never had a lease of (or cleaned up, or that aged out) holds
    # nothing for the child to wait for or continue: under LATEST the child starts at LATEST, not at its start.
    read = {(k.stream, k.shard_id) for k in kcl_leases} | {k for k, x in ours.items() if not x.skipped}
    kcl_leases = [
        replace(k, parents=tuple(p for p in k.parents if (k.stream, p) in read)) for k in kcl_leases
    ]
    plans = []
    for kcl in _parents_first(kcl_leases):
        target, note = _target(kcl, kinesis, timestamp)
        lease = ours.get((kcl.stream, kcl.shard_id))
        cp = store.get(kcl.stream, kcl.shard_id) if lease is not None else None
        current = cp.position if cp is not None else None
        if kcl.pending_checkpoint:
            note = "; ".join(
                filter(None, [note, f"its pending checkpoint {kcl.pending_checkpoint} is not imported"])
            )
        if lease is None:
            action = Action.CREATE
        elif target is None or target == current:
            action = Action.UNCHANGED
        elif current is None or current < target:
            action = Action.FORWARD
        elif lease.ended:  # finished here: its children may be running; an ended lease never reopens
            action = Action.KEEP_AHEAD
            note = "; ".join(
                filter(None, [note, "ours has ended (children may be running): kept even with --force"])
            )
        else:
            action = Action.BACKWARD if force else Action.KEEP_AHEAD
        plans.append(ShardPlan(kcl, target, kcl.sentinel == "SHARD_END", lease, current, action, note))
    return ImportPlan(tuple(plans), tuple(left_out))


def _create(ddb: Any, lease_table: str, checkpoint_table: str, plan: ShardPlan, now_ms: int) -> bool:
    """The lease (free, epoch 0) and its checkpoint in one transaction; False if one appeared meanwhile.

    As discovery's leases (``consumer.retrieval.discovery.new_lease``), it records where its shard starts
    (``first_sequence``: a stream created again is then told apart and the lease started afresh), and one
    without a checkpoint or parents records ``now_ms`` (``latest_ms``): under ``LATEST`` every owner without a
    checkpoint reads it from then, so a take-over before the first checkpoint skips nothing."""
    kcl = plan.kcl
    lease = Lease(
        kcl.stream,
        kcl.shard_id,
        state=LeaseState.ENDED if plan.ended else LeaseState.ACTIVE,
        parents=kcl.parents,
        first_sequence=kcl.first_sequence,  # None (not written) only for leases not checked
        latest_ms=now_ms if plan.target is None and not plan.ended and not kcl.parents else None,
    )
    key = lease.key
    # The checkpoint item as an ownership change leaves it: epoch mirrors the lease's.
    checkpoint: dict[str, Any] = {
        "lease_key": key,
        "epoch": 0,
        "stream": kcl.stream,
        "shard_id": kcl.shard_id,
    }
    if plan.target is not None:
        checkpoint.update(
            sequence=plan.target.sequence,
            sub_sequence=plan.target.sub_sequence,
            position_key=plan.target.sort_key(),
        )
    items = [
        {
            "Put": {
                "TableName": lease_table,
                "Item": to_item(lease_item(lease)),
                "ConditionExpression": "attribute_not_exists(lease_key)",
            }
        },
        {
            "Put": {
                "TableName": checkpoint_table,
                "Item": to_item(checkpoint),
                "ConditionExpression": "attribute_not_exists(lease_key)",
            }
        },
    ]
    try:
        with translate_errors(lease_table, f"create {key}"):
            ddb.transact_write_items(TransactItems=items)
    except LeaseConflictError:  # a worker of ours created it first
        return False
    return True


def apply_plans(
    ddb: Any, repo: DynamoDBLeaseRepository, plans: Sequence[ShardPlan], now_ms: int | None = None
) -> list[str]:
    """Carry the plans out, parents first; returns the per-shard lines (what was done). ``now_ms``: the wall
    time the leases created without a checkpoint record as their ``LATEST`` (default: now)."""
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    lines = []
    for plan in plans:
        if plan.action is Action.CREATE:
            if not _create(ddb, repo.table, repo.checkpoint_table, plan, now_ms):
                raise ConsumerError(
                    f"{plan.kcl.stream}/{plan.kcl.shard_id}: a lease of ours appeared while importing; run it again"
                )
        elif plan.action in (Action.FORWARD, Action.BACKWARD):
            assert plan.lease is not None and plan.target is not None
            try:
                repo.reset_checkpoint(plan.lease, plan.target)  # epoch + 1: its current owner stops
            except LeaseConflictError as exc:
                raise ConsumerError(f"{plan.lease.key} changed while importing; run it again") from exc
        log_event(
            logger,
            "kcl_lease_imported",
            stream=plan.kcl.stream,
            shard=plan.kcl.shard_id,
            action=plan.action.value,
            kcl_checkpoint=plan.kcl.checkpoint,
            position=str(plan.target) if plan.target else None,
            before=str(plan.current) if plan.current else None,
        )
        lines.append(plan.line())
    return lines
