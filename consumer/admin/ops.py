"""Operator actions on a running fleet: status, drain, replay. The same code against emulators or AWS."""

from __future__ import annotations

import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from consumer.admin.status import worker_state
from consumer.checkpoint.store import CheckpointStore
from consumer.errors import ConfigError, ConsumerError, LeaseConflictError, MissingResourceError
from consumer.leases.model import Lease
from consumer.leases.repository import LeaseRepository
from consumer.logs import log_event
from consumer.records import Position

__all__ = [
    "NO_UNDO",
    "ReplayPlan",
    "check_sequence",
    "drain",
    "first_sequence",
    "plan_replay",
    "position_refused",
    "replay",
    "shard_spans",
]

logger = logging.getLogger(__name__)


def drain(
    repo: LeaseRepository, worker_id: str, *, lease_duration: float = 10.0, now_ms: int | None = None
) -> None:
    """Ask ``worker_id`` to hand its leases over and exit. ``MissingResourceError`` for an unknown id, and for
    a worker that ``status`` shows dead (no heartbeat for ``lease_duration`` seconds, or its own longer one):
    nothing would act on the request, and its leases are taken over once they expire."""
    worker = repo.get_worker(worker_id)
    if worker is None:
        raise MissingResourceError(f"no live worker {worker_id!r} (see the status command for the fleet)")
    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    state, since = worker_state(worker, now_ms, lease_duration * 1000)
    if state == "dead":
        raise MissingResourceError(
            f"no live worker {worker_id!r}: it looks dead (no heartbeat since {since}, longer than the lease "
            f"duration of {worker.silence_allowed(lease_duration):g}s), so nothing would drain it; its leases "
            "will be taken over once they expire by live workers that consume their streams (see the status "
            "command: a stream no live worker lists is shown 'not consumed')"
        )
    repo.request_drain(worker_id)
    log_event(logger, "drain_requested_by_operator", worker=worker_id)


@dataclass(frozen=True)
class ReplayPlan:
    lease: Lease
    old_checkpoint: Position | None  # None: no checkpoint (the shard started at the initial position)
    new_checkpoint: Position  # records after this position are delivered again


# Between two GetRecords of one shard, start to start: an operator's walk shares the shard's 5 reads a second
# with its owner, so it takes at most 2 of them.
WALK_INTERVAL = 0.5


def first_sequence(
    kinesis: Any,
    stream: str,
    shard_id: str,
    *,
    max_calls: int = 100,
    interval: float = WALK_INTERVAL,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    **iterator: Any,
) -> str | None:
    """The sequence number of the first record an iterator of ``iterator`` (``ShardIteratorType`` and its
    arguments) reaches within ``max_calls`` GetRecords calls, ``interval`` seconds apart (start to start); None
    when the shard has nothing there yet."""
    it = kinesis.get_shard_iterator(StreamName=stream, ShardId=shard_id, **iterator)["ShardIterator"]
    last = float("-inf")
    for _ in range(max_calls):
        if (wait := last + interval - clock()) > 0:
            sleep(wait)
        last = clock()
        out = kinesis.get_records(ShardIterator=it, Limit=1)
        if out["Records"]:
            return str(out["Records"][0]["SequenceNumber"])
        it = out.get("NextShardIterator")
        if it is None or out.get("MillisBehindLatest") == 0:
            return None
    return None


def shard_spans(kinesis: Any, stream: str) -> dict[str, tuple[int, int | None]]:
    """Each shard ``stream`` still lists, with its sequence range (start, end or None while it is open)."""
    spans: dict[str, tuple[int, int | None]] = {}
    kwargs: dict[str, Any] = {"StreamName": stream}
    while True:
        out = kinesis.list_shards(**kwargs)
        for shard in out.get("Shards", []):
            rng = shard.get("SequenceNumberRange", {})
            end = rng.get("EndingSequenceNumber")
            spans[shard["ShardId"]] = (int(rng["StartingSequenceNumber"]), int(end) if end else None)
        if not out.get("NextToken"):
            return spans
        kwargs = {"NextToken": out["NextToken"]}


def _shard_range(kinesis: Any, stream: str, shard_id: str) -> tuple[int, int | None]:
    span = shard_spans(kinesis, stream).get(shard_id)
    if span is None:
        raise MissingResourceError(
            f"shard {stream}/{shard_id} is no longer in the stream (expired past the retention period)"
        )
    return span


def check_sequence(
    kinesis: Any, stream: str, shard_id: str, sequence: str, setting: str = "--sequence"
) -> None:
    """The position exists in the shard: within its sequence range, and Kinesis gives an iterator at it
    (what the next owner asks for). Raises ``ConfigError`` naming ``setting`` otherwise."""
    hint = " (sequence numbers belong to one shard: give --shard for the shard that holds it)"
    span = _shard_range(kinesis, stream, shard_id)
    if (why := position_refused(kinesis, stream, shard_id, sequence, span)) is not None:
        raise ConfigError(setting, f"{why}{hint}")


def position_refused(
    kinesis: Any, stream: str, shard_id: str, sequence: str, span: tuple[int, int | None]
) -> str | None:
    """Why ``sequence`` is not a position in the shard whose sequence range is ``span`` (start, end or None while
    open): outside the range, or Kinesis refuses an iterator at it; None when it is one."""
    start, end = span
    if int(sequence) < start or (end is not None and int(sequence) > end):
        range_ = f"{start}..{end}" if end is not None else f"{start} onwards"
        return f"{sequence} is not in shard {stream}/{shard_id} (range {range_})"
    try:
        kinesis.get_shard_iterator(
            StreamName=stream,
            ShardId=shard_id,
            ShardIteratorType="AT_SEQUENCE_NUMBER",
            StartingSequenceNumber=sequence,
        )
    except ClientError as exc:
        error = exc.response.get("Error", {})
        # Kinesis answers InvalidArgument for a position outside the shard; emulators also answer
        # ResourceNotFound (the shard itself was listed before).
        if error.get("Code") not in {
            "InvalidArgumentException",
            "ValidationException",
            "ResourceNotFoundException",
        }:
            raise
        return (
            f"{sequence} is not a position in shard {stream}/{shard_id}: Kinesis says "
            f"{error.get('Message', error.get('Code'))}"
        )
    return None


def _replay_target(
    kinesis: Any,
    stream: str,
    shard_id: str,
    timestamp: datetime | None,
    sequence: str | None,
    checkpoint: Position | None,
) -> Position | None:
    """The checkpoint a replay sets in one shard (None: no record after ``timestamp`` yet), checked there."""
    if checkpoint is not None:  # where the next owner starts from: it must be a position there
        if checkpoint.sub_sequence < -1:
            raise ConfigError("--checkpoint", f"the sub-sequence must be -1 or more, got {checkpoint}")
        check_sequence(kinesis, stream, shard_id, checkpoint.sequence, "--checkpoint")
        return checkpoint
    if sequence is not None:
        check_sequence(kinesis, stream, shard_id, sequence)
        return Position(sequence, -1)  # just before the sequence: it is delivered again
    assert timestamp is not None
    first = first_sequence(kinesis, stream, shard_id, ShardIteratorType="AT_TIMESTAMP", Timestamp=timestamp)
    return Position(first, -1) if first else None


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
    say: Callable[[str], None] = print,
) -> list[ReplayPlan]:
    """Where each targeted shard would restart. Raises naming an unknown stream or shard.

    With ``timestamp`` and no ``shard_id``, every ended shard of the stream (closed by a reshard) is left
    out: its records after the time are not replayed. One line each says so through ``say`` (the plan the
    operator confirms: printed on stdout by default, before the plan's own lines) and in the log
    (``replay_skipped``, WARNING)."""
    snap = repo.snapshot()
    leases = [x for x in snap.leases if x.stream == stream]
    if not leases:
        raise MissingResourceError(f"unknown stream {stream!r}: no leases for it in the lease table")
    if shard_id is not None:
        leases = [x for x in leases if x.shard_id == shard_id]
        if not leases:
            raise MissingResourceError(f"unknown shard {shard_id!r} of stream {stream!r}")
    plans = []
    ended = []
    for lease in sorted(leases, key=lambda x: x.shard_id):
        if lease.ended:
            if shard_id is not None:
                raise ConsumerError(_not_replayable(lease))
            ended.append(lease)
            continue
        cp = store.get(stream, lease.shard_id)
        target = _replay_target(kinesis, stream, lease.shard_id, timestamp, sequence, checkpoint)
        if target is None:
            log_event(
                logger, "replay_skipped", stream=stream, shard=lease.shard_id, reason="no records after time"
            )
            continue
        plans.append(ReplayPlan(lease, cp.position if cp else None, target))
    if timestamp is not None:
        for lease in ended:  # told once every shard is checked: nothing is said of a replay refused
            _tell_ended(stream, lease.shard_id, timestamp, say)
    return plans


def _not_replayable(lease: Lease) -> str:
    """Why an ended shard asked for by name is not replayed."""
    if lease.skipped:
        return (
            f"{lease.stream}/{lease.shard_id} was skipped (closed before the application first listed it, "
            "under LATEST): it is never read, and a replay cannot reopen it"
        )
    return f"{lease.stream}/{lease.shard_id} has ended; its children carry on from it"


def _tell_ended(stream: str, shard_id: str, timestamp: datetime, say: Callable[[str], None]) -> None:
    """An ended shard is not replayed: its records after ``timestamp`` (if any) are not delivered again."""
    since = f"{timestamp.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
    say(
        f"{stream}/{shard_id}: has ended (closed by a reshard): its records after {since} are NOT replayed "
        "(an ended shard cannot be reopened)"
    )
    log_event(
        logger,
        "replay_skipped",
        logging.WARNING,
        stream=stream,
        shard=shard_id,
        reason="shard ended: its records after the time are not replayed",
        timestamp=since,
    )


#: The undo line of a shard that had no checkpoint: its owners started at the application's initial position
#: (``CONSUMER_INITIAL_POSITION``: TRIM_HORIZON, LATEST or AT_TIMESTAMP, whichever it runs with), and a replay
#: always sets a checkpoint, so none restores that.
NO_UNDO = (
    "(no checkpoint before: the shard started at the application's initial position "
    "(CONSUMER_INITIAL_POSITION); a replay always sets a checkpoint, so it cannot restore that)"
)


def replay(
    repo: LeaseRepository, plans: list[ReplayPlan], *, lease_table: str, checkpoint_table: str
) -> list[str]:
    """Apply the plans; log each old checkpoint with the command that restores it. Returns undo commands.

    Each undo command names ``lease_table`` and ``checkpoint_table`` (the tables the plans were made on): run
    as printed, in whatever environment, it moves this application's checkpoint and no other's."""
    tables = f"--lease-table {shlex.quote(lease_table)} --checkpoint-table {shlex.quote(checkpoint_table)}"
    undo = []
    for p in plans:
        try:
            repo.reset_checkpoint(p.lease, p.new_checkpoint)
        except LeaseConflictError as exc:
            raise ConsumerError(f"{p.lease.key} changed while replaying; run the command again") from exc
        old = p.old_checkpoint
        restore = (
            f"python -m consumer replay {tables} --stream {shlex.quote(p.lease.stream)} "
            f"--shard {shlex.quote(p.lease.shard_id)} --checkpoint {old.sequence}/{old.sub_sequence} --yes"
            if old is not None
            else NO_UNDO
        )
        log_event(
            logger,
            "checkpoint_replayed",
            logging.WARNING,
            stream=p.lease.stream,
            shard=p.lease.shard_id,
            old_checkpoint=str(old) if isinstance(old, Position) else None,
            new_checkpoint=str(p.new_checkpoint),
            old_owner=p.lease.owner,
            undo=restore,
        )
        undo.append(restore)
    return undo
