"""A stream deleted and created again under the same name is a new stream: discovery starts afresh each lease
whose shard id now names a shard that starts elsewhere (next epoch, no owner, no checkpoint) and retires the
old stream's leases whose shard is not listed, so the new stream is read from the initial position instead of
from the old stream's checkpoints (docs/operations.md, "A stream deleted under the fleet")."""

from __future__ import annotations

import logging

import pytest

from consumer.checkpoint.store import CheckpointItem
from consumer.errors import CheckpointRejectedError
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.records import Position
from consumer.retrieval.discovery import of_an_earlier_stream, sync_leases
from consumer.retrieval.kinesis import ShardInfo
from consumer.retrieval.memory import InMemoryKinesis


def _sync(
    kinesis: InMemoryKinesis, repo: InMemoryLeaseRepository, limit: int | None = None
) -> tuple[int, bool]:
    return sync_leases(kinesis, repo, "s", repo.snapshot().leases, limit)


def _by_key(repo: InMemoryLeaseRepository, key: str) -> Lease | None:
    return next(iter(repo.get_leases((key,))), None)


def _leases(repo: InMemoryLeaseRepository) -> dict[str, Lease]:
    return {x.shard_id: x for x in repo.snapshot().leases}


def _consumed_then_recreated(
    shards_before: int, shards_after: int
) -> tuple[InMemoryKinesis, InMemoryTables, InMemoryLeaseRepository]:
    """A stream whose leases were created, owned and checkpointed (one of them ended by a split), then
    deleted and created again under the same name."""
    kinesis, tables = InMemoryKinesis(), InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    kinesis.create_stream("s", shards_before)
    kinesis.put("s", "shardId-000000000000", b"old")
    kinesis.split("s", "shardId-000000000000")
    _sync(kinesis, repo)
    repo.register_worker(WorkerItem("w"))
    store = InMemoryCheckpointStore(tables)
    for lease in repo.snapshot().leases:
        if lease.shard_id == "shardId-000000000000":
            taken = repo.take(lease, "w", None)
            store.save("s", lease.shard_id, taken.epoch, Position("49000000000000000000001"))
            repo.mark_ended(taken)
        elif lease.shard_id == "shardId-000000000001":
            taken = repo.take(lease, "w", None)
            store.save("s", lease.shard_id, taken.epoch, Position("49000000000000000000002"))
    kinesis.delete_stream("s")
    kinesis.create_stream("s", shards_after)
    return kinesis, tables, repo


def test_each_lease_of_the_new_streams_shards_starts_afresh_and_the_old_ones_are_retired() -> None:
    kinesis, tables, repo = _consumed_then_recreated(2, 2)
    before = _leases(repo)
    assert set(before) == {f"shardId-{i:012d}" for i in range(4)}  # two shards, two children of a split
    assert _sync(kinesis, repo) == (4, False)  # two restarts, two retirements
    after = _leases(repo)
    assert set(after) == {"shardId-000000000000", "shardId-000000000001"}
    listed = {s.shard_id: s for s in kinesis.list_shards("s")}
    for shard_id, lease in after.items():
        old = before[shard_id]
        # The ended one is open again; the owned one is free; both at the next epoch, with no checkpoint.
        assert lease == Lease(
            "s", shard_id, epoch=old.epoch + 1, first_sequence=listed[shard_id].starting_sequence
        )
        assert tables.checkpoints[("s", shard_id)] == CheckpointItem("s", shard_id, lease.epoch, None)
    assert _sync(kinesis, repo) == (0, False)  # once: the restarted leases are this stream's now


def test_the_old_owner_is_woken_and_its_next_checkpoint_is_refused() -> None:
    kinesis, tables, repo = _consumed_then_recreated(2, 2)
    owned = _leases(repo)["shardId-000000000001"]
    inbox = tables.workers["w"].inbox
    _sync(kinesis, repo)
    assert tables.workers["w"].inbox > inbox  # woken (once per lease it held, the ended one too)
    with pytest.raises(CheckpointRejectedError):
        InMemoryCheckpointStore(tables).save(
            "s", owned.shard_id, owned.epoch, Position("49000000000000000000003")
        )


def test_an_old_lease_whose_shard_the_new_stream_lacks_is_retired_even_if_owned() -> None:
    kinesis, tables, repo = _consumed_then_recreated(2, 1)
    assert _leases(repo)["shardId-000000000001"].owner == "w"
    _sync(kinesis, repo)
    assert set(_leases(repo)) == {"shardId-000000000000"}  # not left to fail for ever
    assert set(tables.checkpoints) == {("s", "shardId-000000000000")}


def test_a_restart_whose_lease_moved_since_it_was_read_is_made_again_from_the_lease_as_stored() -> None:
    kinesis, _, repo = _consumed_then_recreated(2, 2)
    seen = repo.snapshot().leases
    repo.release(_leases(repo)["shardId-000000000001"])  # the owner let it go after the snapshot was read
    reread = lambda key: _by_key(repo, key)  # noqa: E731
    assert sync_leases(kinesis, repo, "s", seen, reread=reread) == (4, False)  # two restarts, one made again
    starts = {s.shard_id: s.starting_sequence for s in kinesis.list_shards("s")}
    assert {k: x.first_sequence for k, x in _leases(repo).items()} == starts
    assert _sync(kinesis, repo) == (0, False)


def test_an_unchanged_stream_and_leases_of_earlier_versions_are_left_alone() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 2)
    repo = InMemoryLeaseRepository(InMemoryTables())
    repo.create_lease(Lease("s", "shardId-000000000000"))  # no first sequence: created by an earlier version
    assert _sync(kinesis, repo) == (1, False)  # only the missing lease is created
    assert _leases(repo)["shardId-000000000000"] == Lease("s", "shardId-000000000000")
    assert _sync(kinesis, repo) == (0, False)


def test_of_an_earlier_stream_needs_both_starts() -> None:
    shard = ShardInfo("a", None, None, None, "10")
    assert of_an_earlier_stream(Lease("s", "a", first_sequence="9"), shard)
    assert not of_an_earlier_stream(Lease("s", "a", first_sequence="10"), shard)
    assert not of_an_earlier_stream(Lease("s", "a"), shard)
    assert not of_an_earlier_stream(Lease("s", "a", first_sequence="9"), ShardInfo("a", None, None, None))
    assert not of_an_earlier_stream(None, shard)
    # Compared as the numbers they are: a start recorded from an integer equals the listed text.
    assert not of_an_earlier_stream(
        Lease("s", "a", first_sequence="10"), ShardInfo("a", None, None, None, "010")
    )


def test_a_large_stream_created_again_is_sorted_out_over_several_discoveries() -> None:
    """Within the write budget: the old stream's leases the new one lacks are retired first, while the leases
    still to restart tell that the stream was created again; then the restarts."""
    kinesis, _, repo = _consumed_then_recreated(2, 1)  # four old leases, one new shard
    for _ in range(10):
        if _sync(kinesis, repo, limit=1) == (0, False):
            break
    [only] = repo.snapshot().leases
    assert (only.shard_id, only.first_sequence) == (
        "shardId-000000000000",
        kinesis.list_shards("s")[0].starting_sequence,
    )


class _Churning(InMemoryLeaseRepository):
    """A fleet failing on the old checkpoints: before each of the first ``times`` restarts, the lease is taken
    and released once more (its epoch moves), as the shard that fails is, again and again."""

    def __init__(self, tables: InMemoryTables, times: int) -> None:
        super().__init__(tables)
        self.times, self.tries = times, 0

    def restart_lease(self, seen: Lease, fresh: Lease) -> Lease:
        self.tries += 1
        if self.times:
            self.times -= 1
            [now] = self.get_leases((seen.key,))
            self.release(self.take(now, "w", None) if now.owner is None else now)
        return super().restart_lease(seen, fresh)


@pytest.mark.parametrize(("races", "restarted"), [(2, True), (9, False)])
def test_a_restart_that_loses_races_to_the_failing_fleet_is_made_again_from_the_lease_as_stored(
    races: int, restarted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    kinesis, tables, _ = _consumed_then_recreated(1, 1)
    repo = _Churning(tables, races)
    leases = repo.snapshot().leases  # the leader's read: stale by the time of each restart
    changes, _ = sync_leases(kinesis, repo, "s", leases, reread=lambda key: _by_key(repo, key))
    lease = _leases(repo)["shardId-000000000000"]
    # Before: one try per discovery, conditional on the scan, which the failing shard had always moved past.
    assert (lease.first_sequence == kinesis.list_shards("s")[0].starting_sequence) is restarted
    assert repo.tries == (races + 1 if restarted else 4)
    raced = [r for r in caplog.records if getattr(r, "event", "") == "lease_restart_raced"]
    assert len(raced) == (races if restarted else 4)
    assert changes >= (1 if restarted else 0)
