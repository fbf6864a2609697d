"""``status`` on the in-memory tables: each shard's lag as its owner published it with its heartbeat, how old
it is, and why it is unknown (no owner, owner gone, not published, stale); the same in the text table and the
live view; and what a status of 1,000 shards reads (one scan of each table and the leadership item)."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

from consumer.admin.commands import _print_status
from consumer.admin.status import fleet_status, stored_checkpoints
from consumer.admin.watch import render
from consumer.clock import FakeClock
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import ShardLag
from consumer.records import Position

SEQ = "49590338271490256608559692538361571095921575989136588898"
T0 = 1_700_000_000.0  # seconds: the fake clock's wall and monotonic time


def _fleet() -> tuple[InMemoryTables, InMemoryLeaseRepository, FakeClock]:
    clock = FakeClock(T0)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    for w in ("w1", "w2", "quiet"):
        repo.register_worker(WorkerItem(w, started_ms=clock.wall_ms()))
    for shard in ("a", "b", "c", "d", "free", "ended", "orphan"):
        repo.create_lease(Lease("s", shard))
    owned = {s: repo.take(Lease("s", s), "w1", None) for s in ("a", "b", "ended")}
    repo.take(Lease("s", "c"), "w2", None)
    repo.take(Lease("s", "d"), "quiet", None)
    repo.register_worker(WorkerItem("gone"))
    repo.take(Lease("s", "orphan"), "gone", None)
    repo.deregister_worker("gone")
    repo.mark_ended(owned["ended"])
    # w1 read shard a 0.3 s before its heartbeat, b 12 s before (a batch that has taken that long).
    repo.heartbeat(
        "w1",
        0,
        2,
        False,
        progress={("s", "a"): ShardLag(4200, SEQ, 300), ("s", "b"): ShardLag(90, "7", 12_000)},
    )
    repo.heartbeat("w2", 0, 1, False, progress={("s", "c"): ShardLag(0, "8", 100)})
    repo.heartbeat("quiet", 0, 1, False)  # publishes nothing (e.g. an older version)
    return tables, repo, clock


def _scan(tables: InMemoryTables) -> object:
    """The checkpoint table in one read, as the DynamoDB scan does."""

    def read(leases: Sequence[Lease]) -> Mapping[tuple[str, str], Position | None]:
        tables.calls["Scan"] += 1
        return {k: v.position for k, v in tables.checkpoints.items()}

    return read


def test_each_shard_shows_the_lag_its_owner_published_and_its_age() -> None:
    tables, repo, clock = _fleet()
    clock.advance(2.0)  # the heartbeats are 2 s old
    status = fleet_status(
        repo, stored_checkpoints(InMemoryCheckpointStore(tables)), lease_duration=10.0, now_ms=clock.wall_ms()
    )
    shards = {x.shard_id: x for x in status.leases}
    a = shards["a"]
    assert (a.millis_behind_latest, a.lag_note, a.lag_age_s, a.last_sequence) == (4200, None, 2.3, SEQ)
    assert a.lag_observed_at == "2023-11-14T22:13:19Z"  # the heartbeat's wall time less 0.3 s
    assert (shards["c"].millis_behind_latest, shards["c"].lag_age_s) == (0, 2.1)
    # Observed 14 s ago, more than a lease duration: shown stale, with what was seen and when.
    b = shards["b"]
    assert (b.millis_behind_latest, b.lag_note, b.lag_age_s, b.last_sequence) == (
        None,
        "stale (observed 14s ago)",
        14.0,
        "7",
    )
    assert (shards["d"].millis_behind_latest, shards["d"].lag_note) == (
        None,
        "not published by its owner yet",
    )
    assert (shards["free"].millis_behind_latest, shards["free"].lag_note) == (None, "no owner")
    assert (shards["orphan"].millis_behind_latest, shards["orphan"].lag_note) == (None, "owner gone")
    assert (shards["ended"].millis_behind_latest, shards["ended"].lag_note) == (0, None)
    workers = {w.worker_id: w for w in status.workers}
    assert workers["w1"].progress_bytes > 0 and workers["quiet"].progress_bytes == 0


def test_a_dead_owners_lag_is_stale() -> None:
    tables, repo, clock = _fleet()
    clock.advance(30.0)
    status = fleet_status(
        repo, stored_checkpoints(InMemoryCheckpointStore(tables)), lease_duration=10.0, now_ms=clock.wall_ms()
    )
    c = next(x for x in status.leases if x.shard_id == "c")
    assert (c.state, c.millis_behind_latest, c.lag_note) == ("owner dead", None, "stale (observed 30.1s ago)")


def test_the_text_table_and_the_live_view_show_lag_and_age() -> None:
    tables, repo, clock = _fleet()
    clock.advance(2.0)
    status = fleet_status(
        repo, stored_checkpoints(InMemoryCheckpointStore(tables)), lease_duration=10.0, now_ms=clock.wall_ms()
    )
    out = io.StringIO()
    _print_status(status, out)
    text = out.getvalue()
    assert "lag_ms" in text and "lag_age_s" in text
    assert "4200" in text and "2.3" in text
    assert "? stale (observed 14s ago)" in text and "? no owner" in text
    from rich.console import Console

    console = Console(width=400, record=True)
    console.print(render(status))
    view = console.export_text()
    assert "4.2s (2.3s ago)" in view
    assert "? stale (observed 14s ago)" in view and "? owner gone" in view


def test_a_status_of_1000_shards_is_three_reads() -> None:
    clock = FakeClock(T0)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    workers = [f"w{i}" for i in range(10)]
    for w in workers:
        repo.register_worker(WorkerItem(w))
    published: dict[str, dict[tuple[str, str], ShardLag]] = {w: {} for w in workers}
    for i in range(1000):
        shard, owner = f"shardId-{i:012d}", workers[i % 10]
        repo.create_lease(Lease("s", shard))
        repo.take(Lease("s", shard), owner, None)
        published[owner][("s", shard)] = ShardLag(i, SEQ, 50)
    for w in workers:
        repo.heartbeat(w, 0, 100, False, progress=published[w])
    tables.calls.clear()
    status = fleet_status(repo, _scan(tables), lease_duration=10.0, now_ms=clock.wall_ms())  # type: ignore[arg-type]
    assert sorted(x.millis_behind_latest for x in status.leases) == list(range(1000))  # type: ignore[type-var]
    assert dict(tables.calls) == {"Scan": 2, "GetItem": 1}  # leases and workers, checkpoints, leader
