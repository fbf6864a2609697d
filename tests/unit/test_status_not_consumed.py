"""``status`` of a stream no alive worker consumes (removed from ``CONSUMER_STREAMS`` by a rolling restart): its
leases nobody owns are ``not consumed``, not ``released`` (which says the leader assigns them next: it gives a
stream's leases only to the workers that list it). A worker item that lists no stream (an older version) makes
that unknown, and so does a fleet with no alive worker: those leases stay ``released``. The same in the text
table, ``--json`` and the live view."""

from __future__ import annotations

import io
import json
from dataclasses import asdict

from rich.console import Console

from consumer.admin.commands import _print_status
from consumer.admin.status import FleetStatus, fleet_status, stored_checkpoints
from consumer.admin.watch import render
from consumer.clock import FakeClock
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem
from consumer.records import Position
from tests.unit.test_cli_watch_width import _column, _whole

T0 = 1_700_000_000.0
SHARD, CHILD = "shardId-000000000000", "shardId-000000000001"
W5, W6 = "ip-10-0-1-23.ec2.internal-12345-a1b2c3", "ip-10-0-1-24.ec2.internal-23456-d4e5f6"


def _fleet(*workers: WorkerItem) -> tuple[InMemoryTables, InMemoryLeaseRepository, FakeClock]:
    """Streams s1 (owned by W5), s3 (removed: a released lease with a checkpoint, and a reshard's child) and
    s4 (released), with ``workers`` registered (default: W5 and W6 consuming s1 and s4)."""
    clock = FakeClock(T0)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    for w in workers or (
        WorkerItem(W5, streams=frozenset({"s1", "s4"})),
        WorkerItem(W6, streams=frozenset({"s1", "s4"})),
    ):
        repo.register_worker(WorkerItem(w.worker_id, started_ms=clock.wall_ms(), streams=w.streams))
    for stream in ("s1", "s3", "s4"):
        repo.create_lease(Lease(stream, SHARD))
    repo.create_lease(Lease("s3", CHILD, parents=(SHARD,)))
    repo.take(Lease("s1", SHARD), W5, None)
    # An old worker read s3 and released its lease at shutdown: the checkpoint stays (s3 resumes there).
    repo.register_worker(WorkerItem("old", streams=frozenset({"s3"})))
    s3 = repo.take(Lease("s3", SHARD), "old", None)
    InMemoryCheckpointStore(tables).save("s3", SHARD, s3.epoch, Position("4242"))
    repo.release(s3)
    repo.deregister_worker("old")
    return tables, repo, clock


def _status(tables: InMemoryTables, repo: InMemoryLeaseRepository, clock: FakeClock) -> FleetStatus:
    return fleet_status(
        repo, stored_checkpoints(InMemoryCheckpointStore(tables)), lease_duration=10.0, now_ms=clock.wall_ms()
    )


def _states(status: FleetStatus) -> dict[tuple[str, str], str]:
    return {(x.stream, x.shard_id): x.state for x in status.leases}


def test_a_stream_no_alive_worker_lists_is_not_consumed() -> None:
    status = _status(*_fleet())
    assert _states(status) == {
        ("s1", SHARD): "running",
        ("s3", SHARD): "not consumed",  # before: "released", as if the leader were to assign it next
        ("s3", CHILD): "not consumed",  # nor "waiting for" a parent that nobody reads
        ("s4", SHARD): "released",
    }
    s3 = next(x for x in status.leases if x.stream == "s3" and x.shard_id == SHARD)
    assert s3.detail == "not consumed: no alive worker lists stream s3"
    assert (s3.owner, s3.lag_note, s3.checkpoint) == (None, "no owner", "4242/0")  # the checkpoint stays


def test_a_worker_that_publishes_no_streams_makes_it_unknown() -> None:
    older = WorkerItem("older")  # an item of a version that did not publish its streams: it may consume s3
    states = _states(_status(*_fleet(WorkerItem(W5, streams=frozenset({"s1", "s4"})), older)))
    assert states[("s3", SHARD)] == "released" and states[("s3", CHILD)] == "waiting"


def test_only_alive_workers_count() -> None:
    tables, repo, clock = _fleet(
        WorkerItem(W5, streams=frozenset({"s1", "s4"})),
        WorkerItem("old-draining", streams=frozenset({"s1", "s3"})),
        WorkerItem("old-dead", streams=frozenset({"s3"})),
        WorkerItem("older-dead"),  # lists no stream, but dead: it tells nothing
    )
    clock.advance(30.0)  # every heartbeat is 30 s old: beat again those that are alive
    repo.heartbeat(W5, 0, 1, False)
    repo.heartbeat("old-draining", 0, 1, True)
    status = _status(tables, repo, clock)
    assert {w.worker_id: w.state for w in status.workers} == {
        W5: "alive",
        "old-draining": "draining",
        "old-dead": "dead",
        "older-dead": "dead",
    }
    # The leader gives no lease to a draining or a dead worker: nobody will read s3.
    assert _states(status)[("s3", SHARD)] == "not consumed"


def test_with_no_alive_worker_it_is_unknown() -> None:
    tables, repo, clock = _fleet()
    clock.advance(30.0)  # the whole fleet is stopped: which streams it will consume is not in the table
    assert {w.state for w in _status(tables, repo, clock).workers} == {"dead"}
    assert _states(_status(tables, repo, clock))[("s3", SHARD)] == "released"


def test_the_text_json_and_live_view_say_so() -> None:
    status = _status(*_fleet())
    out = io.StringIO()
    _print_status(status, out)
    [row] = [line for line in out.getvalue().splitlines() if line.split()[:2] == ["s3", SHARD]]
    assert "not consumed: no alive worker lists stream s3" in row, out.getvalue()
    doc = json.loads(json.dumps(asdict(status)))  # what `status --json` prints
    leases = {(x["stream"], x["shard_id"]): x for x in doc["leases"]}
    assert leases[("s3", SHARD)]["state"] == "not consumed" and leases[("s3", SHARD)]["owner"] is None
    assert leases[("s4", SHARD)]["state"] == "released"

    text = io.StringIO()
    Console(width=80, file=text, color_system=None, force_terminal=False).print(render(status, 80))
    shown = text.getvalue()
    assert max(len(line) for line in shown.splitlines()) <= 80
    states = _column(shown, "shards", "state", "shard")
    assert states[1].startswith("not consumed")  # the state's words on its first line
    assert _whole(states) == [
        "running",
        *["notconsumed:noaliveworkerlistsstreams3"] * 2,
        "released",
    ], shown


def test_a_dead_owners_lease_of_a_stream_nobody_lists_is_not_consumed_either() -> None:
    """Its lease expires, but no worker takes it: "taken once its lease expires" would not come true."""
    clock = FakeClock(T0)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    repo.register_worker(WorkerItem("old", started_ms=clock.wall_ms(), streams=frozenset({"s3"})))
    repo.register_worker(WorkerItem(W5, started_ms=clock.wall_ms(), streams=frozenset({"s1"})))
    for stream in ("s1", "s3"):
        repo.create_lease(Lease(stream, SHARD))
    leases = {x.stream: x for x in repo.snapshot().leases}
    repo.take(leases["s3"], "old", None)
    repo.take(leases["s1"], "old", None)
    clock.advance(60)  # "old" stops beating; W5 beats on
    repo.heartbeat(W5, 0, 0, False)
    status = _status(tables, repo, clock)
    states = {x.stream: (x.state, x.detail) for x in status.leases}
    assert states["s3"] == ("not consumed", "not consumed: no alive worker lists stream s3")
    assert states["s1"][0] == "owner dead"  # W5 lists s1: taken once the lease expires
