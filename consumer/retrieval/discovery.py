"""Shard discovery: leases for new shards (parents first), and retirement of ended leases that aged out."""

from __future__ import annotations

import logging

from consumer.leases.model import Lease
from consumer.leases.repository import LeaseTableRepository
from consumer.logs import log_event
from consumer.retrieval.kinesis import KinesisApi, ShardInfo

__all__ = ["parents_first", "sync_leases"]

logger = logging.getLogger(__name__)


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


def sync_leases(
    api: KinesisApi,
    repo: LeaseTableRepository,
    stream: str,
    leases: tuple[Lease, ...],
    limit: int | None = None,
) -> tuple[int, bool]:
    """Create leases for shards without one and retire ENDED leases whose shard is gone, at most ``limit``
    writes (a stream of thousands of shards is created over several calls, within the table's throughput).
    Returns (changes, whether writes remain for a later call)."""
    shards = parents_first(api.list_shards(stream))
    known = {lease.shard_id: lease for lease in leases if lease.stream == stream}
    listed = {s.shard_id for s in shards}
    new = [s for s in shards if s.shard_id not in known]
    gone = [lease for shard_id, lease in known.items() if lease.ended and shard_id not in listed]
    budget = len(new) + len(gone) if limit is None else limit
    changes = 0
    for s in new[:budget]:
        if repo.create_lease(Lease(stream, s.shard_id, parents=s.parents)):
            changes += 1
            log_event(logger, "lease_created", stream=stream, shard=s.shard_id, parents=list(s.parents))
    for lease in gone[: max(0, budget - len(new))]:
        repo.delete_lease(lease)
        changes += 1
        log_event(logger, "lease_retired", stream=stream, shard=lease.shard_id)
    return changes, len(new) + len(gone) > budget
