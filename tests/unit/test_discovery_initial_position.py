"""The leases discovery creates, by the fleet's initial position: each names only the parents the application
reads, and under ``LATEST`` a shard already closed when the application first lists it is skipped, so that a
stream resharded before the application started is read from ``LATEST`` in every open shard, not from the
children's first records (docs/protocol.md, "Checkpoints")."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, LeaseState
from consumer.leases.planner import ready_leases
from consumer.lifecycle.shard_start import initial_position
from consumer.retrieval.discovery import new_lease, sync_leases
from consumer.retrieval.kinesis import ShardInfo
from consumer.retrieval.memory import InMemoryKinesis


def _split_stream() -> tuple[InMemoryKinesis, str, tuple[str, str]]:
    """One shard split before the application starts: a closed parent and two open children."""
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    [parent] = [s.shard_id for s in kinesis.list_shards("s")]
    kinesis.put("s", parent, b"old")
    children = kinesis.split("s", parent)
    for child in children:
        kinesis.put("s", child, b"before the application started")
    return kinesis, parent, children


def _sync(
    kinesis: InMemoryKinesis, repo: InMemoryLeaseRepository, position: str, limit: int | None = None
) -> tuple[int, bool]:
    return sync_leases(kinesis, repo, "s", repo.snapshot().leases, limit, position)


def _leases(repo: InMemoryLeaseRepository) -> dict[str, Lease]:
    """The stored leases, without where each shard starts (tests/unit/test_discovery_recreated_stream.py)."""
    return {x.shard_id: replace(x, first_sequence=None) for x in repo.snapshot().leases}


def test_latest_skips_a_parent_closed_before_the_first_listing_and_starts_its_children_at_latest() -> None:
    kinesis, parent, children = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    assert _sync(kinesis, repo, "LATEST") == (3, False)
    leases = _leases(repo)
    assert leases[parent] == Lease("s", parent, state=LeaseState.ENDED, skipped=True)
    for child in children:
        assert leases[child] == Lease("s", child)  # no parent: nothing of it is read
        assert initial_position(leases[child], "LATEST") == "LATEST"
    # The skipped parent is never assigned; the children are ready at once.
    assert {x.shard_id for x in ready_leases(repo.snapshot().leases)} == set(children)


def test_a_reshard_while_the_application_reads_still_continues_into_the_children() -> None:
    kinesis, _, (left, _right) = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    _sync(kinesis, repo, "LATEST")
    grandchildren = kinesis.split("s", left)  # left is read (from LATEST): its children follow it
    assert _sync(kinesis, repo, "LATEST") == (2, False)
    leases = _leases(repo)
    for g in grandchildren:
        assert leases[g] == Lease("s", g, parents=(left,))
        assert initial_position(leases[g], "LATEST") == "TRIM_HORIZON"
    assert not leases[left].skipped and not leases[left].ended


def test_a_merge_of_a_read_shard_and_a_skipped_one_waits_only_for_the_read_one() -> None:
    listing = [
        ShardInfo("a", None, None, "10"),  # closed before the application started: skipped
        ShardInfo("b", None, None, None),  # open: read from LATEST
    ]
    read: set[str] = set()
    made = []
    for shard in listing:
        lease = new_lease("s", shard, read, "LATEST")
        made.append(lease)
        if not lease.skipped:
            read.add(shard.shard_id)
    assert [x.skipped for x in made] == [True, False]
    merged = new_lease("s", ShardInfo("m", "a", "b", None), read, "LATEST")
    assert merged.parents == ("b",)
    assert initial_position(merged, "LATEST") == "TRIM_HORIZON"  # b was read up to its end


def test_a_chain_closed_before_the_start_is_skipped_down_to_the_open_shard() -> None:
    kinesis, _, (left, right) = _split_stream()
    [merged] = [kinesis.merge("s", left, right)]
    repo = InMemoryLeaseRepository(InMemoryTables())
    _sync(kinesis, repo, "LATEST")
    leases = _leases(repo)
    assert [x.skipped for x in (leases[left], leases[right])] == [True, True]
    assert leases[merged] == Lease("s", merged)
    assert initial_position(leases[merged], "LATEST") == "LATEST"


def test_a_listing_split_over_several_discoveries_decides_as_one() -> None:
    """The write budget may create a skipped parent in one discovery and its children in the next: they read
    its ``skipped`` from the table."""
    kinesis, parent, children = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    assert _sync(kinesis, repo, "LATEST", limit=1) == (1, True)
    assert _leases(repo)[parent].skipped
    assert _sync(kinesis, repo, "LATEST", limit=5) == (2, False)
    leases = _leases(repo)
    assert all(leases[c].parents == () for c in children)


def test_a_parent_created_by_another_leader_first_counts_as_decided() -> None:
    kinesis, parent, children = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    stale = repo.snapshot().leases  # read before the other leader's write
    repo.create_lease(Lease("s", parent, state=LeaseState.ENDED, skipped=True))
    sync_leases(kinesis, repo, "s", stale, None, "LATEST")
    assert all(_leases(repo)[c].parents == () for c in children)


@pytest.mark.parametrize("position", ["TRIM_HORIZON", "AT_TIMESTAMP"])
def test_other_positions_read_every_shard_and_continue_into_children(position: str) -> None:
    kinesis, parent, children = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    assert _sync(kinesis, repo, position) == (3, False)
    leases = _leases(repo)
    assert leases[parent] == Lease("s", parent)
    assert all(leases[c] == Lease("s", c, parents=(parent,)) for c in children)


@pytest.mark.parametrize("position", ["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"])
def test_a_parent_that_aged_out_before_the_first_listing_is_left_out(position: str) -> None:
    """Kinesis still names a child's parents after they aged out of the stream: nothing is left to read."""
    lease = new_lease("s", ShardInfo("c", "gone", None, None), set(), position)
    assert lease == Lease("s", "c")
    assert initial_position(lease, position) == position


def test_a_lease_from_before_skipped_existed_still_counts_as_read() -> None:
    """A table written by an earlier version has no ``skipped``: its ended leases were read to their end."""
    kinesis, parent, children = _split_stream()
    repo = InMemoryLeaseRepository(InMemoryTables())
    repo.create_lease(Lease("s", parent, state=LeaseState.ENDED))
    _sync(kinesis, repo, "LATEST")
    leases = _leases(repo)
    assert all(leases[c].parents == (parent,) for c in children)
    assert all(initial_position(leases[c], "LATEST") == "TRIM_HORIZON" for c in children)
