"""A parent shard that aged out of the stream while the application was stopped (longer than the retention,
across a reshard), on the in-memory fakes (kinesis-local cannot age a shard out): its lease, never read to its
end, is retired, so its children are read. Before, discovery retired only ended leases: the parent's lease
stayed ACTIVE for good, its owners failed on a shard that no longer exists, and the children waited for it."""

from __future__ import annotations

from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import WorkerItem
from consumer.leases.planner import ready_leases
from consumer.lifecycle.shard_start import initial_position
from consumer.records import Position
from consumer.retrieval.discovery import sync_leases
from consumer.retrieval.memory import InMemoryKinesis


def test_a_parent_that_aged_out_unread_is_retired_and_its_children_are_ready() -> None:
    kinesis, tables = InMemoryKinesis(), InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    kinesis.create_stream("s", 1)
    parent = "shardId-000000000000"
    kinesis.put("s", parent, b"read")
    sync_leases(kinesis, repo, "s", (), None, "LATEST", 1)
    repo.register_worker(WorkerItem("w"))
    [lease] = repo.snapshot().leases
    taken = repo.take(lease, "w", None)
    InMemoryCheckpointStore(tables).save("s", parent, taken.epoch, Position("49000000000000000000002"))
    # The application stops; the stream is resharded and, past its retention, the parent trimmed.
    children = kinesis.split("s", parent)
    kinesis.age_out("s", parent)
    sync_leases(kinesis, repo, "s", repo.snapshot().leases, None, "LATEST", 2)
    leases = {x.shard_id: x for x in repo.snapshot().leases}
    assert set(leases) == set(children)  # the parent's lease and checkpoint are gone
    assert ("s", parent) not in tables.checkpoints
    assert {x.shard_id for x in ready_leases(repo.snapshot().leases)} == set(children)
    # They continue from the parent the application was reading: from their first record.
    assert all(initial_position(leases[c], "LATEST") == "TRIM_HORIZON" for c in children)


class _EmptyListing(InMemoryKinesis):
    def list_shards(self, stream: str) -> list:  # type: ignore[type-arg]
        return []


def test_a_listing_without_an_open_shard_retires_nothing() -> None:
    """A stream always has an open shard: a listing with none (a stream being created or deleted) is not
    taken as every shard gone, leases and checkpoints with them."""
    kinesis, tables = _EmptyListing(), InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    real = InMemoryKinesis()
    real.create_stream("s", 2)
    sync_leases(real, repo, "s", (), None, "TRIM_HORIZON", 1)
    assert sync_leases(kinesis, repo, "s", repo.snapshot().leases, None, "TRIM_HORIZON", 2) == (0, False)
    assert len(repo.snapshot().leases) == 2
