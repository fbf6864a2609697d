"""Shard discovery: leases for new shards (parents first), and retirement of leases whose shard is gone.

A new shard's lease names only the parents this application reads (``Lease.parents``): its children start
from their first record after them (``shard_start.initial_position``). Under ``LATEST`` a shard already
closed when the application first lists it, with no parent it reads, is not read at all: its lease is
created ``ENDED`` and ``skipped``, so its children start at ``LATEST`` too instead of at their first record
(a stream resharded before the application started, e.g. every on-demand stream that ever scaled).

A lease records where its shard starts (``Lease.first_sequence``). A listed shard of the same id that starts
elsewhere belongs to a stream deleted and created again under the same name: its lease is started afresh
(``restart_lease``: next epoch, no owner, no checkpoint, so it is read from the initial position), and the
old stream's leases whose shard is not listed are retired."""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumer.errors import LeaseConflictError
from consumer.leases.model import Lease, LeaseState
from consumer.leases.repository import DiscoveryRepository
from consumer.logs import log_event
from consumer.retrieval.kinesis import KinesisApi, ShardInfo

__all__ = ["Reread", "new_lease", "of_an_earlier_stream", "parents_first", "sync_leases"]

logger = logging.getLogger(__name__)

#: A lease as stored now, by key (strongly consistent; None if absent).
Reread = Callable[[str], Lease | None]


def parents_first(shards: list[ShardInfo]) -> list[ShardInfo]:
    """Order shards so that every parent listed comes before its children."""
    by_id = {s.shard_id: s for s in shards}
    out: list[ShardInfo] = []
    seen: set[str] = set()

    def visit(s: ShardInfo) -> None:
        if s.shard_id in seen:
            return
        seen.add(s.shard_id)
        for p in s.parents:
            if p in by_id:
                visit(by_id[p])
        out.append(s)

    for s in shards:
        visit(s)
    return out


def new_lease(
    stream: str, shard: ShardInfo, read: set[str], initial_position: str, now_ms: int | None = None
) -> Lease:
    """The lease to create for ``shard``, whose parents come first; ``read``: the shards of ``stream`` this
    application reads or has read (a lease that is not ``skipped``), each parent's decision already in it.

    Its ``parents`` are those in ``read``: a parent that aged out before the application listed it, or one
    skipped, holds nothing for the child to wait for or to continue. Under ``LATEST`` a closed shard with no
    such parent is skipped: created ``ENDED``, never assigned, never read; one read from ``LATEST`` records
    ``now_ms`` (``latest_ms``): every owner without a checkpoint reads it from then."""
    parents = tuple(p for p in shard.parents if p in read)
    first = shard.starting_sequence
    if initial_position == "LATEST" and shard.ending_sequence is not None and not parents:
        return Lease(stream, shard.shard_id, state=LeaseState.ENDED, skipped=True, first_sequence=first)
    latest_ms = now_ms if initial_position == "LATEST" and not parents else None
    return Lease(stream, shard.shard_id, parents=parents, first_sequence=first, latest_ms=latest_ms)


def of_an_earlier_stream(lease: Lease | None, shard: ShardInfo) -> bool:
    """Whether ``lease`` was created for a shard of this id in an earlier stream of the same name (deleted and
    created again): the shard it recorded started elsewhere. Unknown (False) when either does not say."""
    if lease is None or lease.first_sequence is None or shard.starting_sequence is None:
        return False
    recorded, listed = lease.first_sequence, shard.starting_sequence
    if recorded.isdigit() and listed.isdigit():  # as numbers: ``import-kcl`` records them from integers
        return int(recorded) != int(listed)
    return recorded != listed


def sync_leases(
    api: KinesisApi,
    repo: DiscoveryRepository,
    stream: str,
    leases: tuple[Lease, ...],
    limit: int | None = None,
    initial_position: str = "TRIM_HORIZON",
    now_ms: int | None = None,
    reread: Reread | None = None,
) -> tuple[int, bool]:
    """Create leases for shards without one (``new_lease``, under the fleet's ``initial_position``), start
    afresh those of an earlier stream of the same name (``of_an_earlier_stream``), and retire the leases
    whose shard is no longer listed (aged out, or of the earlier stream), at most
    ``limit`` writes (a stream of thousands of shards is created over several calls, within the table's
    throughput). Returns (changes, whether writes remain for a later call). ``now_ms``: the wall time new
    ``LATEST`` leases record (``new_lease``); ``reread``: a lease as stored now, from which a restart that lost
    a race is made again (``_restart``; None: left to the next discovery)."""
    shards = parents_first(api.list_shards(stream))
    known = {lease.shard_id: lease for lease in leases if lease.stream == stream}
    earlier = {
        s.shard_id: known[s.shard_id] for s in shards if of_an_earlier_stream(known.get(s.shard_id), s)
    }
    read = {shard_id for shard_id, lease in known.items() if not lease.skipped and shard_id not in earlier}
    listed = {s.shard_id for s in shards}
    new = [s for s in shards if s.shard_id not in known or s.shard_id in earlier]
    # A shard no longer listed does not exist (aged out of the stream, or its stream was created again): its
    # lease goes, ended or not. An ACTIVE one held its children back for good: an application stopped for
    # longer than the retention across a reshard waited on a parent nobody could read to its end.
    # Only from a listing with an open shard, as every stream that exists has: one that has none (a stream
    # being created or deleted, whatever Kinesis answers then) retires nothing.
    whole = any(s.ending_sequence is None for s in shards)
    gone = [lease for shard_id, lease in known.items() if shard_id not in listed] if whole else []
    budget = len(new) + len(gone) if limit is None else limit
    if earlier:  # the old stream's leases it lacks go first, while the unrestarted ones still tell of it
        retired = _retire(repo, stream, gone[:budget])
        created = _create(
            repo, stream, new[: budget - retired], earlier, read, initial_position, now_ms, reread
        )
    else:
        created = _create(repo, stream, new[:budget], earlier, read, initial_position, now_ms, reread)
        retired = _retire(repo, stream, gone[: max(0, budget - len(new))])
    return created + retired, len(new) + len(gone) > budget


def _create(
    repo: DiscoveryRepository,
    stream: str,
    shards: list[ShardInfo],
    earlier: dict[str, Lease],
    read: set[str],
    initial_position: str,
    now_ms: int | None,
    reread: Reread | None,
) -> int:
    """Create the leases of ``shards`` (parents first), restarting those of an earlier stream: the writes
    that went through."""
    changes = 0
    for s in shards:
        lease = new_lease(stream, s, read, initial_position, now_ms)
        if not lease.skipped:  # decided alike by any leader: a lease another one created first counts too
            read.add(s.shard_id)
        if s.shard_id in earlier:
            changes += _restart(repo, earlier[s.shard_id], lease, s, reread)
        elif repo.create_lease(lease):
            changes += 1
            log_event(  # skipped: closed before the application listed it, under LATEST (never read)
                logger,
                "lease_created",
                stream=stream,
                shard=s.shard_id,
                parents=list(lease.parents),
                skipped=lease.skipped,
            )
    return changes


def _retire(repo: DiscoveryRepository, stream: str, leases: list[Lease]) -> int:
    """Delete ``leases`` (and their checkpoints): their shard is gone."""
    for lease in leases:
        repo.delete_lease(lease)
        log_event(logger, "lease_retired", stream=stream, shard=lease.shard_id)
    return len(leases)


#: Tries of a restart whose lease moved on since it was read (each after reading it again).
_RESTART_TRIES = 4


def _restart(
    repo: DiscoveryRepository, seen: Lease, fresh: Lease, shard: ShardInfo, reread: Reread | None
) -> int:
    """Start ``seen`` afresh as ``fresh`` (1 write), made again from the lease as stored now while it moved on
    meanwhile and is still of the earlier stream. Its shard fails under the old checkpoint, so while the
    fleet runs it is taken, failed and released again and again, each time with a new epoch: a restart
    conditional on the leader's scan, or tried once per discovery, never found it as read, and the stream
    created again was never read. 0 if it is no longer to restart, or still moving after ``_RESTART_TRIES``
    (the next discovery tries again)."""
    for attempt in range(1, _RESTART_TRIES + 1):
        try:
            repo.restart_lease(seen, fresh)
            break
        except LeaseConflictError:
            current = reread(seen.key) if reread is not None else None
            if current is None or not of_an_earlier_stream(current, shard):
                return 0  # retired, or started afresh by another leader
            log_event(logger, "lease_restart_raced", stream=seen.stream, shard=seen.shard_id, attempt=attempt)
            seen = current
    else:
        return 0
    log_event(
        logger,
        "lease_restarted",
        logging.WARNING,
        stream=seen.stream,
        shard=seen.shard_id,
        reason="the stream was created again: this shard starts at a sequence number the lease's did not",
        starts_at=shard.starting_sequence,
        lease_started_at=seen.first_sequence,
        old_owner=seen.owner,
        old_epoch=seen.epoch,
        old_state=seen.state.value,
    )
    return 1
