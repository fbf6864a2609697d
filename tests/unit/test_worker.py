"""The worker end to end on in-memory fakes (fast): delivery, checkpoints, failures, resharding, hand-off."""

from __future__ import annotations

import pytest

from consumer.config import CheckpointConfig, ProcessingConfig
from consumer.leases.memory import InMemoryTables
from consumer.leases.model import LeaseState
from consumer.records import SHARD_END, Position
from consumer.retrieval.memory import InMemoryKinesis
from consumer.sinks.dlq import InMemoryDeadLetterQueue

from .helpers import PROCESSOR_KINDS, Journal, make_worker, start, wait_until


def fill(kinesis: InMemoryKinesis, stream: str, shards: int, per_shard: int) -> dict[str, list[str]]:
    kinesis.create_stream(stream, shards)
    out: dict[str, list[str]] = {}
    for s in range(shards):
        shard = f"shardId-{s:012d}"
        out[shard] = [kinesis.put(stream, shard, f"r{s}-{i}".encode()) for i in range(per_shard)]
    return out


def checkpoint(tables: InMemoryTables, stream: str, shard: str) -> Position | None:
    item = tables.checkpoints.get((stream, shard))
    return item.position if item else None


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_every_record_delivered_once_and_checkpointed(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 3, 120)
    worker = make_worker("w1", tables, kinesis, journal, kind=kind)
    t = start(worker)
    wait_until(lambda: len(journal.deliveries) == 360, what="all records")
    wait_until(lambda: all(checkpoint(tables, "s", sh) == Position(seqs[-1]) for sh, seqs in put.items()))
    worker.request_shutdown()
    t.join(5)
    for shard, seqs in put.items():
        assert journal.sequences(shard) == seqs  # in order, none twice
    # Async callbacks ran on the worker's one event loop, not a loop per shard; sync ones never start it.
    assert journal.threads == ({"asyncio-w1"} if kind == "async" else set())
    assert worker._ctx.event_loop.started is (kind == "async")
    assert not tables.workers  # deregistered
    assert all(lease.owner is None for lease in tables.leases.values())  # released: nobody left to take it


def test_two_streams_each_with_its_processor() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    fill(kinesis, "a", 1, 10)
    fill(kinesis, "b", 2, 10)
    worker = make_worker("w1", tables, kinesis, journal, streams=("a", "b"))
    t = start(worker)
    wait_until(lambda: len(journal.deliveries) == 30)
    worker.request_shutdown()
    t.join(5)
    assert {k[0] for k in tables.leases} == {"a", "b"}


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_failing_record_goes_to_dlq_and_nothing_is_skipped(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 1, 20)
    dlq = InMemoryDeadLetterQueue()
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        fail=lambda d: d == b"r0-7",
        dlq=dlq,
        processing=ProcessingConfig(
            max_attempts=3, backoff_base=0.001, on_failure="dlq", dlq_url="mem://dlq"
        ),
        kind=kind,
    )
    t = start(worker)
    shard = "shardId-000000000000"
    wait_until(lambda: checkpoint(tables, "s", shard) == Position(put[shard][-1]))
    worker.request_shutdown()
    t.join(5)
    delivered = set(journal.sequences())
    dead = [m["sequence_number"] for m in dlq.messages]
    assert dead == [put[shard][7]]
    assert delivered | set(dead) == set(put[shard])
    assert dlq.messages[0]["error_type"] == "RuntimeError" and dlq.messages[0]["data_base64"]
    assert worker.metrics.total("DeadLettered") == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_halt_policy_stops_the_shard_before_the_failing_record(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 2, 20)
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        fail=lambda d: d == b"r0-5",
        processing=ProcessingConfig(max_attempts=2, backoff_base=0.001, on_failure="halt"),
        kind=kind,
    )
    t = start(worker)
    bad, good = "shardId-000000000000", "shardId-000000000001"
    wait_until(lambda: checkpoint(tables, "s", good) == Position(put[good][-1]))
    wait_until(lambda: tables.leases[("s", bad)].halted_at is not None, what="the halt marked on the lease")
    assert checkpoint(tables, "s", bad) == Position(put[bad][4])  # up to, not past, the failing record
    assert put[bad][5] not in journal.sequences(bad)
    assert tables.leases[("s", bad)].owner == "w1"  # held: nobody else skips it either
    # Every record processed is counted, the five before the failing one too (they were not, before).
    assert worker.metrics.total("RecordsProcessed") == 20 + 5  # type: ignore[attr-defined]
    worker.request_shutdown()
    t.join(5)
    # After shutdown the lease is free and the checkpoint still sits before the failing record.
    assert checkpoint(tables, "s", bad) == Position(put[bad][4])


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_manual_mode_checkpoints_what_is_done(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 2, 50)
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        checkpoint=CheckpointConfig(mode="manual", flush_interval=0.05),
        kind=kind,
    )
    t = start(worker)
    wait_until(lambda: all(checkpoint(tables, "s", sh) == Position(seqs[-1]) for sh, seqs in put.items()))
    worker.request_shutdown()
    t.join(5)


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_split_and_merge_children_after_parents_and_nothing_lost(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 2, 30)
    worker = make_worker("w1", tables, kinesis, journal, kind=kind)
    t = start(worker)
    wait_until(lambda: len(journal.deliveries) == 60)
    kid_a, kid_b = kinesis.split("s", "shardId-000000000000")
    later = {
        kid_a: [kinesis.put("s", kid_a, f"a{i}".encode()) for i in range(10)],
        kid_b: [kinesis.put("s", kid_b, f"b{i}".encode()) for i in range(10)],
    }
    merged = kinesis.merge("s", kid_a, kid_b)
    later[merged] = [kinesis.put("s", merged, f"m{i}".encode()) for i in range(10)]
    wait_until(lambda: len(journal.deliveries) == 90, what="children delivered")
    worker.request_shutdown()
    t.join(5)
    order = [d[1] for d in journal.deliveries]
    assert max(i for i, s in enumerate(order) if s == "shardId-000000000000") < order.index(kid_a)
    assert max(i for i, s in enumerate(order) if s in (kid_a, kid_b)) < order.index(merged)
    for shard, seqs in {**put, **later}.items():
        assert journal.sequences(shard) == seqs
    assert tables.leases[("s", "shardId-000000000000")].state is LeaseState.ENDED
    assert checkpoint(tables, "s", kid_a) == SHARD_END
    events = [e for _, sh, e in journal.events if sh == "shardId-000000000000"]
    assert "shard_ended" in events


def test_expired_iterator_is_recovered_without_skipping() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 1, 10)
    worker = make_worker("w1", tables, kinesis, journal)
    t = start(worker)
    shard = "shardId-000000000000"
    wait_until(lambda: len(journal.deliveries) == 10)
    kinesis.expire_next.add(shard)
    more = [kinesis.put("s", shard, f"x{i}".encode()) for i in range(5)]
    wait_until(lambda: len(journal.deliveries) == 15)
    worker.request_shutdown()
    t.join(5)
    assert journal.sequences(shard) == put[shard] + more


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_shutdown_hands_leases_to_the_other_worker_which_resumes_at_the_checkpoint(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 4, 40)
    a = make_worker("a", tables, kinesis, journal, kind=kind)
    b = make_worker("b", tables, kinesis, journal, kind=kind)
    ta, tb = start(a), start(b)
    wait_until(lambda: len(journal.deliveries) == 160)
    wait_until(lambda: {lease.owner for lease in tables.leases.values()} == {"a", "b"}, what="balanced")
    a.request_shutdown()
    ta.join(5)
    assert all(lease.owner == "b" for lease in tables.leases.values())
    extra = {sh: [kinesis.put("s", sh, b"late") for _ in range(3)] for sh in put}
    wait_until(lambda: len(journal.deliveries) == 172)
    b.request_shutdown()
    tb.join(5)
    for shard in put:
        assert journal.sequences(shard) == put[shard] + extra[shard]  # exactly once across the hand-off


@pytest.mark.parametrize("kind", PROCESSOR_KINDS)
def test_scale_out_moves_leases_by_handoff_without_duplicates(kind: str) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    put = fill(kinesis, "s", 4, 20)
    a = make_worker("a", tables, kinesis, journal, kind=kind)
    ta = start(a)
    wait_until(lambda: len(journal.deliveries) == 80)
    b = make_worker("b", tables, kinesis, journal, kind=kind)
    tb = start(b)
    wait_until(lambda: sum(1 for x in tables.leases.values() if x.owner == "b") == 2, what="b gets its share")
    more = {sh: [kinesis.put("s", sh, b"x") for _ in range(5)] for sh in put}
    wait_until(lambda: len(journal.deliveries) == 100)
    for w, t in ((a, ta), (b, tb)):
        w.request_shutdown()
        t.join(5)
    for shard in put:
        assert journal.sequences(shard) == put[shard] + more[shard]
    assert a.metrics.total("HandoffLatencyMs") > 0  # type: ignore[attr-defined]


def test_auto_checkpoint_interval_batches_writes_and_still_checkpoints_at_shutdown() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = "shardId-000000000000"
    worker = make_worker("w1", tables, kinesis, journal, checkpoint=CheckpointConfig(auto_interval=60))
    t = start(worker)
    seqs = []
    for i in range(20):
        seqs.append(kinesis.put("s", shard, f"{i}".encode()))
        wait_until(lambda n=i: len(journal.deliveries) == n + 1)
    assert worker.metrics.total("Checkpoints") == 0  # type: ignore[attr-defined]  # none within the interval
    worker.request_shutdown()
    t.join(5)
    assert checkpoint(tables, "s", shard) == Position(seqs[-1])  # the final checkpoint covers everything
    assert worker.metrics.total("Checkpoints") == 1  # type: ignore[attr-defined]


def test_leases_of_streams_the_worker_does_not_consume_are_left_alone() -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    fill(kinesis, "a", 1, 5)
    fill(kinesis, "new", 2, 5)
    newer = make_worker("newer", tables, kinesis, journal, streams=("a", "new"))
    older = make_worker("older", tables, kinesis, journal, streams=("a",))
    t_old = start(older)
    wait_until(lambda: len(journal.deliveries) == 5)
    t_new = start(newer)
    wait_until(lambda: len(journal.deliveries) == 15, what="the new stream consumed by the newer worker")
    assert all(x.owner == "newer" for x in tables.leases.values() if x.stream == "new")
    for w, t in ((older, t_old), (newer, t_new)):
        w.request_shutdown()
        t.join(5)


def test_discovery_creates_at_most_its_limit_and_says_more_remain() -> None:
    from consumer.leases.memory import InMemoryLeaseRepository
    from consumer.retrieval.discovery import sync_leases

    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 5)
    repo = InMemoryLeaseRepository(tables)
    assert sync_leases(kinesis, repo, "s", (), limit=3) == (3, True)
    assert sync_leases(kinesis, repo, "s", repo.snapshot().leases, limit=3) == (2, False)
    assert len(tables.leases) == 5
