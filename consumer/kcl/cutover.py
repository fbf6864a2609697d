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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from consumer.admin.ops import first_sequence, position_refused, shard_spans
from consumer.aws_errors import aws_call
from consumer.checkpoint.store import CheckpointStore
from consumer.dynamo import to_item, translate_errors
from consumer.errors import ConfigError, ConsumerError, LeaseConflictError, MissingResourceError
from consumer.kcl.lease_table import KclLease
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.leases.model import Lease, LeaseState, lease_key
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
        kcl = _kcl_position(self.kcl)
        target = str(self.target) if self.target is not None else "(none: the fleet's initial position)"
        ours = str(self.current) if self.current is not None else "-"
        extra = f"; {self.note}" if self.note else ""
        owner = f", owner {self.kcl.owner}" if self.kcl.owner else ""
        return (
            f"{self.kcl.stream}/{self.kcl.shard_id}: KCL {kcl}{owner} -> {target}: {self.action.value} "
            f"(ours before: {ours}){extra}"
        )


def _kcl_position(kcl: KclLease) -> str:
    return kcl.checkpoint + (f"/{kcl.sub_sequence}" if kcl.sentinel is None else "")


@dataclass(frozen=True)
class LeftOut:
    """A KCL lease the import leaves out, and why: one line of the plan."""

    kcl: KclLease
    why: str

    def line(self) -> str:
        """The report line: the shard, the KCL lease and why nothing is imported for it."""
        owner = f", owner {self.kcl.owner}" if self.kcl.owner else ""
        return (
            f"{self.kcl.stream}/{self.kcl.shard_id}: KCL {_kcl_position(self.kcl)}{owner}: left out "
            f"(lease {self.kcl.lease_key}): {self.why}"
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


def _shard_spans(kinesis: Any, stream: str, setting: str) -> dict[str, tuple[int, int | None]]:
    """``shard_spans`` of ``stream``; a stream that does not exist names ``setting``."""
    try:
        with aws_call("kinesis", f"list the shards of {stream}"):
            return shard_spans(kinesis, stream)
    except MissingResourceError:
        raise ConfigError(setting, f"Kinesis stream {stream!r} does not exist") from None


def _created(kinesis: Any, stream: str, setting: str) -> datetime:
    """When ``stream`` (as it is now) was created: its ``StreamCreationTimestamp``."""
    try:
        with aws_call("kinesis", f"describe {stream}"):
            summary = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    except MissingResourceError:
        raise ConfigError(setting, f"Kinesis stream {stream!r} does not exist") from None
    created: datetime = summary["StreamCreationTimestamp"]
    return created


def _epoch_text(seconds: float) -> str:
    """``1714564800 = 2024-05-01T12:00:00Z`` (the number alone past any date, e.g. milliseconds)."""
    try:
        when = datetime.fromtimestamp(int(seconds), UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return str(int(seconds))
    return f"{int(seconds)} = {when}"


def _former_incarnation(kcl: KclLease, epoch: int, created: datetime, setting: str) -> str | None:
    """Why a multi-stream lease (its key's creation ``epoch``) belongs to a former stream of the same name (None:
    to the stream as it is now). The KCL's creationEpoch is whole seconds; the creation time has a fraction."""
    now = created.timestamp()
    if abs(epoch - now) < 1:
        return None
    if epoch > now:
        raise ConfigError(
            setting,
            f"KCL lease {kcl.lease_key}: creationEpoch {_epoch_text(epoch)} is after stream "
            f"{kcl.stream!r} was created ({_epoch_text(now)}): not a lease of this stream "
            "(the KCL's creationEpoch is epoch seconds)",
        )
    return (
        f"a former stream {kcl.stream!r} (creationEpoch {_epoch_text(epoch)}; the stream now was "
        f"created {_epoch_text(now)})"
    )


def _shard_number(shard_id: str) -> int | None:
    prefix, _, number = shard_id.rpartition("-")
    return int(number) if prefix and number.isdigit() else None


def _oldest_if_older(shard_id: str, spans: dict[str, tuple[int, int | None]]) -> str | None:
    """The oldest shard the stream lists, when ``shard_id`` is older still (Kinesis numbers a stream's shards in
    the order it makes them): a shard the stream no longer lists that is older than all it lists has expired."""
    number = _shard_number(shard_id)
    listed = [(n, s) for s in spans if (n := _shard_number(s)) is not None]
    if number is None or not listed:
        return None
    oldest_number, oldest = min(listed)
    return oldest if number < oldest_number else None


def check_streams(
    kcl_leases: list[KclLease], kinesis: Any, *, leave_out_expired: bool = False
) -> tuple[list[KclLease], list[LeftOut]]:
    """The leases worth importing, each held to its stream, and those left out (with why). A lease of a
    multi-stream table belongs to the stream as it is now only if its key's creationEpoch is the stream's
    ``StreamCreationTimestamp``: the KCL keeps the leases of a deleted stream, and a re-created stream of the
    same name has shards of the same ids, so an older epoch's lease (a former stream) is left out. The stream
    must list the lease's shard, and a sequence-number checkpoint must be a position in it. A wrong
    ``--stream`` (or a lease table of another application) is refused here, before anything is written, rather
    than leaving leases the fleet never reads or positions it cannot start from. A lease whose shard the stream
    no longer lists is left out when it is finished (``SHARD_END``: nothing is left to read there, and the KCL
    keeps such leases for a while), or, with ``leave_out_expired``, when the shard is older than every shard the
    stream lists (it expired past the retention period before the KCL finished it); otherwise it is refused,
    saying which. Two leases left for one shard are refused: which holds its position cannot be told."""
    spans: dict[str, dict[str, tuple[int, int | None]]] = {}
    created: dict[str, datetime] = {}
    keep: list[KclLease] = []
    left: list[LeftOut] = []
    former: dict[str, list[KclLease]] = {}  # per stream, its leases of an earlier creationEpoch
    live: set[str] = set()  # streams with a lease of their current creationEpoch
    for kcl in kcl_leases:
        setting = "--kcl-table" if ":" in kcl.lease_key else "--stream"  # where the stream's name came from
        if kcl.stream not in spans:
            spans[kcl.stream] = _shard_spans(kinesis, kcl.stream, setting)
        if kcl.creation_epoch is not None:
            if kcl.stream not in created:  # one DescribeStreamSummary per stream
                created[kcl.stream] = _created(kinesis, kcl.stream, setting)
            why = _former_incarnation(kcl, kcl.creation_epoch, created[kcl.stream], setting)
            if why is not None:
                left.append(LeftOut(kcl, why))
                former.setdefault(kcl.stream, []).append(kcl)
                continue
            live.add(kcl.stream)
        span = spans[kcl.stream].get(kcl.shard_id)
        if span is None:
            left.append(_unlisted(kcl, spans[kcl.stream], setting, leave_out_expired))
            continue
        if kcl.sentinel is None:
            with aws_call("kinesis", f"check {kcl.stream}/{kcl.shard_id}"):
                why = position_refused(kinesis, kcl.stream, kcl.shard_id, kcl.checkpoint, span)
            if why is not None:
                raise ConfigError(
                    setting, f"KCL lease {kcl.lease_key}: {why}; is it the KCL application's stream?"
                )
        keep.append(kcl)
    _refuse_only_former(former, live, created)
    _refuse_two_for_one_shard(keep)
    for out in left:
        log_event(
            logger,
            "kcl_lease_skipped",
            stream=out.kcl.stream,
            shard=out.kcl.shard_id,
            lease=out.kcl.lease_key,
            why=out.why,
        )
    return keep, left


def _unlisted(
    kcl: KclLease, spans: dict[str, tuple[int, int | None]], setting: str, leave_out_expired: bool
) -> LeftOut:
    """A lease whose shard the stream no longer lists: left out (finished, or expired and so allowed), else
    refused, saying whether the shard looks expired."""
    if kcl.sentinel == "SHARD_END":
        return LeftOut(kcl, "finished, and its shard is no longer listed (expired past the retention period)")
    oldest = _oldest_if_older(kcl.shard_id, spans)
    if oldest is not None and leave_out_expired:
        return LeftOut(
            kcl,
            f"its shard is no longer listed and is older than every listed shard (the oldest: {oldest}): expired "
            "past the retention period before the KCL finished it (--leave-out-expired)",
        )
    if oldest is not None:
        raise ConfigError(
            "--leave-out-expired",
            f"Kinesis stream {kcl.stream!r} no longer lists shard {kcl.shard_id} (KCL lease {kcl.lease_key}, at "
            f"{kcl.checkpoint}), which is older than every shard it lists (the oldest: {oldest}): it looks "
            "expired past the retention period before the KCL finished it; give --leave-out-expired to import "
            "without it (its unread records are gone)",
        )
    raise ConfigError(
        setting,
        f"Kinesis stream {kcl.stream!r} has no shard {kcl.shard_id} (KCL lease {kcl.lease_key}): "
        "is it the KCL application's stream?",
    )


def _refuse_only_former(
    former: dict[str, list[KclLease]], live: set[str], created: dict[str, datetime]
) -> None:
    """A stream none of whose leases carries its creation time is refused, not left out whole: its leases may
    be a deleted stream's, or the KCL application's stream configuration may give another number than the
    creation time; which, the import cannot tell, and leaving them all out would start every shard of a live
    application at the fleet's initial position (``LATEST`` skips what the KCL had not read)."""
    for stream, leases in sorted(former.items()):
        if stream in live:
            continue
        epochs = ", ".join(sorted({_epoch_text(k.creation_epoch or 0) for k in leases}))
        raise ConfigError(
            "--kcl-table",
            f"none of the {len(leases)} KCL leases of stream {stream!r} carries its creation time "
            f"({_epoch_text(created[stream].timestamp())}; theirs: {epochs}): if they are a deleted stream's, "
            f"there is nothing to import for {stream!r} (import the other streams with --stream); if the KCL "
            "application gives its streams another creationEpoch, this import cannot tell its leases apart",
        )


def _refuse_two_for_one_shard(leases: list[KclLease]) -> None:
    by_shard: dict[tuple[str, str], list[KclLease]] = {}
    for kcl in leases:
        by_shard.setdefault((kcl.stream, kcl.shard_id), []).append(kcl)
    for (stream, shard), same in sorted(by_shard.items()):
        if len(same) > 1:
            keys = ", ".join(kcl.lease_key for kcl in same)
            raise ConfigError(
                "--kcl-table",
                f"{len(same)} KCL leases map to {stream}/{shard} ({keys}): refusing to guess which holds its "
                "position",
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


def _create(ddb: Any, lease_table: str, checkpoint_table: str, plan: ShardPlan) -> bool:
    """The lease (free, epoch 0) and its checkpoint in one transaction; False if one appeared meanwhile."""
    kcl = plan.kcl
    key = lease_key(kcl.stream, kcl.shard_id)
    state = LeaseState.ENDED if plan.ended else LeaseState.ACTIVE
    lease = {
        "lease_key": key,
        "item_type": "lease",
        "stream": kcl.stream,
        "shard_id": kcl.shard_id,
        "epoch": 0,
        "state": state.value,
        "parents": list(kcl.parents),
    }
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
                "Item": to_item(lease),
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


def apply_plans(ddb: Any, repo: DynamoDBLeaseRepository, plans: Sequence[ShardPlan]) -> list[str]:
    """Carry the plans out, parents first; returns the per-shard lines (what was done)."""
    lines = []
    for plan in plans:
        if plan.action is Action.CREATE:
            if not _create(ddb, repo.table, repo.checkpoint_table, plan):
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
