"""What the shard loops read, published with the heartbeat: the registry (ages, forgetting, the cap, many
threads), its encoding on the worker item, the heartbeat lane that publishes it, and a worker end to end on
the in-memory fakes (its item carries each shard's lag and last sequence while it reads, and nothing once the
shard's loop has finished)."""

from __future__ import annotations

import random
import threading
from typing import Any, cast

from consumer.clock import FakeClock
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.progress import MAX_PUBLISHED, ShardLag, decode_progress, encode_progress
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.lanes import HeartbeatLane, HeartbeatParams
from consumer.lifecycle.messages import Event
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.lifecycle.progress import ShardProgress
from consumer.records import Position
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until

SEQ = "49590338271490256608559692538361571095921575989136588898"


def _seq(rng: random.Random) -> str:
    return "4959" + "".join(rng.choice("0123456789") for _ in range(52))


# -- the registry ------------------------------------------------------------------------------------------
def test_a_snapshot_holds_each_shards_last_read_and_its_age() -> None:
    clock = FakeClock(100.0)
    progress = ShardProgress(clock)
    progress.read(Lease("s", "a"), 5000, Position("11"))
    clock.advance(1.5)
    progress.read(Lease("s", "a"), 3000, Position("12", 3))  # the newer read replaces the older
    progress.read(Lease("t", "a"), None, None)  # another stream, same shard id: its own entry
    clock.advance(0.25)
    assert progress.snapshot() == {
        ("s", "a"): ShardLag(3000, "12", 250),
        ("t", "a"): ShardLag(None, None, 250),
    }
    progress.forget(Lease("s", "a").key)
    progress.forget(Lease("s", "never").key)  # nothing to forget: no error
    assert set(progress.snapshot()) == {("t", "a")}
    assert len(progress) == 1


def test_past_its_limit_a_snapshot_keeps_the_shards_most_behind() -> None:
    progress = ShardProgress(FakeClock(0.0), limit=3)
    for i, lag in enumerate([10, None, 500, 0, 70, 9000]):
        progress.read(Lease("s", f"sh{i}"), lag, None)
    assert {k[1]: v.millis_behind_latest for k, v in progress.snapshot().items()} == {
        "sh2": 500,
        "sh4": 70,
        "sh5": 9000,
    }


def test_reads_from_many_threads_while_snapshots_are_taken() -> None:
    progress = ShardProgress()
    go, errors = threading.Event(), []

    def loop(shard: int) -> None:
        go.wait()
        for i in range(500):
            progress.read(Lease("s", f"sh{shard}"), i, Position(str(i)))

    def snap() -> None:
        go.wait()
        try:
            for _ in range(200):
                for lag in progress.snapshot().values():
                    assert lag.age_ms >= 0
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(8)] + [threading.Thread(target=snap)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join(30)
    assert not errors
    assert {k: (v.millis_behind_latest, v.last_sequence) for k, v in progress.snapshot().items()} == {
        ("s", f"sh{i}"): (499, "499") for i in range(8)
    }


# -- the encoding ------------------------------------------------------------------------------------------
def test_the_encoding_round_trips_and_stays_small() -> None:
    rng = random.Random(7)
    assert encode_progress({}) == b"" and decode_progress(b"") == {}
    some = {("orders", "shardId-000000000001"): ShardLag(1234, SEQ, 80), ("x", "y"): ShardLag(None, None, 0)}
    assert decode_progress(encode_progress(some)) == some
    # Hundreds of shards a worker: about 40 bytes a shard (random 56-digit sequence numbers, the worst case).
    many = {
        ("orders-production", f"shardId-{i:012d}"): ShardLag(
            rng.randint(0, 10**6), _seq(rng), rng.randint(0, 9999)
        )
        for i in range(500)
    }
    blob = encode_progress(many)
    assert decode_progress(blob) == many
    assert len(blob) < 500 * 45
    # The most a worker publishes, with long names: well under DynamoDB's 400 KB item limit.
    most = {
        ("s" * 128, f"shardId-{i:012d}"): ShardLag(rng.randint(0, 10**8), _seq(rng), rng.randint(0, 10**6))
        for i in range(MAX_PUBLISHED)
    }
    assert len(encode_progress(most)) < 120_000


def test_an_unreadable_attribute_reads_as_nothing_published() -> None:
    assert decode_progress(b"not zlib") == {}
    import zlib

    assert decode_progress(zlib.compress(b'{"v": 99, "s": {}}')) == {}


# -- the heartbeat lane --------------------------------------------------------------------------------------
class _Repo:
    def __init__(self) -> None:
        self.published: list[Any] = []
        self.beat = threading.Event()

    def heartbeat(self, worker_id: str, generation: int, lease_count: int, draining: bool, **kw: Any) -> int:
        self.published.append(kw.get("progress", "absent"))
        self.beat.set()
        return len(self.published)


def _one_beat(progress: ShardProgress | None, clock: FakeClock) -> Any:
    repo, events = _Repo(), list[Event]()
    validity = OwnValidity(clock, 5.0)
    lane = HeartbeatLane(
        "w", cast(LeaseRepository, repo), validity, clock, 1.0, 0.2, events.append, progress=progress
    )
    lane.start()
    try:
        lane.request(HeartbeatParams(0, 1, False))
        assert repo.beat.wait(5)
    finally:
        lane.stop(2.0)
    return repo.published[0]


def test_each_heartbeat_publishes_a_snapshot() -> None:
    clock = FakeClock(10.0)
    progress = ShardProgress(clock)
    progress.read(Lease("s", "a"), 700, Position(SEQ))
    clock.advance(0.4)
    assert _one_beat(progress, clock) == {("s", "a"): ShardLag(700, SEQ, 400)}
    assert _one_beat(None, clock) == "absent"  # no registry: the stored progress is left as it is


# -- the repository and the worker ----------------------------------------------------------------------------
def test_the_memory_repository_stores_replaces_keeps_and_removes() -> None:
    tables = InMemoryTables()
    repo = InMemoryLeaseRepository(tables)
    repo.register_worker(WorkerItem("w"))
    first = {("s", "a"): ShardLag(5, "1", 0)}
    repo.heartbeat("w", 0, 1, False, progress=first)
    assert decode_progress(tables.workers["w"].progress) == first
    repo.heartbeat("w", 0, 1, False)  # None: kept
    assert decode_progress(tables.workers["w"].progress) == first
    repo.heartbeat("w", 0, 0, False, progress={})  # empty: removed
    assert tables.workers["w"].progress == b""


class _Held(BaseProcessor):
    """Holds its first batch until released: the shard stays behind, as a backlog does."""

    def __init__(self, release: threading.Event, entered: threading.Event) -> None:
        self.release, self.entered = release, entered

    def process_records(self, data: ProcessRecordsInput) -> None:
        self.entered.set()
        assert self.release.wait(10)


def test_a_worker_publishes_each_shards_lag_while_it_reads_and_forgets_it_after() -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    seqs = [kinesis.put("s", "shardId-000000000000", f"r{i}".encode()) for i in range(120)]
    release, entered = threading.Event(), threading.Event()
    worker = make_worker("w1", tables, kinesis, Journal(), processor=lambda: _Held(release, entered))
    t = start(worker)

    def published() -> dict[tuple[str, str], ShardLag]:
        item = tables.workers.get("w1")
        return decode_progress(item.progress) if item is not None else {}

    try:
        assert entered.wait(10)
        key = ("s", "shardId-000000000000")
        # The first batch (50 records) is held: the worker's item says how far behind it is and where it read.
        wait_until(lambda: key in published(), what="the shard's progress on the worker item")
        assert published()[key].millis_behind_latest == 1000  # the fake's "behind" answer
        assert published()[key].last_sequence == seqs[49]
        release.set()
        wait_until(
            lambda: published().get(key) == ShardLag(0, seqs[-1], published()[key].age_ms),
            what="the caught-up lag and the last record read",
        )
    finally:
        release.set()
        worker.request_shutdown()
        t.join(10)
    assert len(worker.progress) == 0  # every shard loop finished: nothing left to publish
