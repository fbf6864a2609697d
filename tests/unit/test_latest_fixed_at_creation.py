"""``LATEST`` is fixed once per shard, when discovery creates its lease (``Lease.latest_ms``): every owner of a
shard without a checkpoint, and every new iterator, reads from that time (``AT_TIMESTAMP``). Before, each owner
and each new iterator resolved ``LATEST`` again, so a take-over before the shard's first checkpoint (a crash, a
scale-out, a rolling deploy in the first minutes of a new application) skipped every record put in between."""

from __future__ import annotations

from datetime import UTC, datetime

from consumer.config import RetrievalConfig
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease
from consumer.lifecycle.shard_start import initial_position, start_timestamp
from consumer.retrieval.discovery import new_lease, sync_leases
from consumer.retrieval.kinesis import ShardInfo
from consumer.retrieval.memory import InMemoryKinesis
from consumer.retrieval.polling import PollingReader

NOW_MS = 1_700_000_000_123
LATEST = RetrievalConfig(initial_position="LATEST")


def test_discovery_records_when_a_latest_lease_was_created() -> None:
    open_shard = ShardInfo("a", None, None, None, "1")
    assert new_lease("s", open_shard, set(), "LATEST", NOW_MS).latest_ms == NOW_MS
    # A child that continues a parent the application reads starts at its first record: no time.
    child = ShardInfo("c", "a", None, None, "2")
    assert new_lease("s", child, {"a"}, "LATEST", NOW_MS).latest_ms is None
    # Skipped shards are never read; other positions have their own start.
    assert new_lease("s", ShardInfo("z", None, None, "9", "0"), set(), "LATEST", NOW_MS).latest_ms is None
    for position in ("TRIM_HORIZON", "AT_TIMESTAMP"):
        assert new_lease("s", open_shard, set(), position, NOW_MS).latest_ms is None


def test_the_stored_lease_keeps_the_time() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 2)
    repo = InMemoryLeaseRepository(InMemoryTables())
    sync_leases(kinesis, repo, "s", (), None, "LATEST", NOW_MS)
    assert {x.latest_ms for x in repo.snapshot().leases} == {NOW_MS}


def test_every_owner_without_a_checkpoint_starts_at_the_creation_time() -> None:
    lease = Lease("s", "a", "w2", 7, latest_ms=NOW_MS)  # any owner, any epoch
    assert initial_position(lease, "LATEST") == "AT_TIMESTAMP"
    assert start_timestamp(lease, LATEST) == datetime.fromtimestamp(NOW_MS / 1000, UTC)
    # A lease from an earlier version has no time: LATEST as before.
    assert initial_position(Lease("s", "a"), "LATEST") == "LATEST"
    assert start_timestamp(Lease("s", "a"), LATEST) is None
    # A configured AT_TIMESTAMP keeps its own time.
    at = datetime(2024, 5, 1, tzinfo=UTC)
    cfg = RetrievalConfig(initial_position="AT_TIMESTAMP", initial_timestamp=at)
    assert start_timestamp(lease, cfg) == at


def test_a_second_owner_reads_what_came_after_the_creation_which_latest_again_would_skip() -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    kinesis.put("s", "shardId-000000000000", b"before the application")
    created_ms = int(datetime.now(UTC).timestamp() * 1000) + 1
    while int(datetime.now(UTC).timestamp() * 1000) <= created_ms:  # the next record arrives after it
        pass
    lease = Lease("s", "shardId-000000000000", latest_ms=created_ms)
    kinesis.put("s", "shardId-000000000000", b"after, before the take-over")

    def read(initial: str) -> list[bytes]:
        reader = PollingReader(
            kinesis,
            "s",
            lease.shard_id,
            LATEST,
            after=None,
            initial_position=initial,
            timestamp=start_timestamp(lease, LATEST),
        )
        fetched = reader.fetch()
        assert fetched is not None
        return [r.data for r in fetched.records]

    assert read(initial_position(lease, "LATEST")) == [b"after, before the take-over"]
    assert read("LATEST") == []  # what each owner did before: the record is skipped
