"""``status`` of a stream the leader's discovery found gone: its shards are ``stream gone`` (assigned to nobody
until it exists again), as the leader's heartbeat publishes it, in ``--json`` and the table; a leader that is dead
tells nothing, and a halted or ended shard keeps its state. Before, they showed ``released`` (the leader would
assign them next) or ``owner dead`` (taken once the lease expires), neither of which would happen."""

from __future__ import annotations

import io

from consumer.admin.commands import _print_status
from consumer.admin.status import FleetStatus, fleet_status, stored_checkpoints
from consumer.clock import FakeClock
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease, WorkerItem

START = 1_700_000_000.0


def _fleet() -> tuple[FakeClock, InMemoryTables, InMemoryLeaseRepository]:
    """Stream ``g`` deleted, ``s`` there; ``w1`` leads and found ``g`` gone; ``w0`` died owning ``g/sh1``."""
    clock = FakeClock(START)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    for w in ("w0", "w1"):
        repo.register_worker(WorkerItem(w, started_ms=clock.wall_ms(), streams=frozenset({"g", "s"})))
    repo.claim_leader(None, "w1", None)
    for lease in (
        Lease("g", "sh0"),
        Lease("g", "sh1"),
        Lease("g", "sh2"),
        Lease("g", "sh3"),
        Lease("s", "sh0"),
    ):
        repo.create_lease(lease)
    repo.take(Lease("g", "sh1"), "w0", None)
    repo.mark_halted(repo.take(Lease("g", "sh2"), "w1", None), "49590", clock.wall_ms())
    repo.mark_ended(repo.take(Lease("g", "sh3"), "w1", None))
    clock.advance(30)  # w0 is silent since: dead
    repo.heartbeat("w1", 0, 2, False, gone=frozenset({"g"}))
    return clock, tables, repo


def _status(clock: FakeClock, tables: InMemoryTables, repo: InMemoryLeaseRepository) -> FleetStatus:
    return fleet_status(repo, stored_checkpoints(InMemoryCheckpointStore(tables)), now_ms=clock.wall_ms())


def _states(status: FleetStatus) -> dict[str, str]:
    return {f"{x.stream}/{x.shard_id}": x.state for x in status.leases}


def test_the_shards_of_a_stream_the_leader_found_gone_are_stream_gone() -> None:
    clock, tables, repo = _fleet()
    status = _status(clock, tables, repo)
    assert _states(status) == {
        "g/sh0": "stream gone",  # before: released
        "g/sh1": "stream gone",  # before: owner dead
        "g/sh2": "halted",  # an operator's to act on, gone or not
        "g/sh3": "ended",
        "s/sh0": "released",
    }
    assert status.gone_streams == ("g",)
    [sh0] = [x for x in status.leases if (x.stream, x.shard_id) == ("g", "sh0")]
    assert sh0.detail == "stream gone: Kinesis says g does not exist; assigned to nobody"
    out = io.StringIO()
    _print_status(status, out)
    assert out.getvalue().count("stream gone: Kinesis says g does not exist; assigned to nobody") == 2


def test_a_dead_leader_tells_nothing_and_a_leader_that_found_none_gone_neither() -> None:
    clock, tables, repo = _fleet()
    clock.advance(30)  # the leader is silent too: what it published may be stale
    repo.heartbeat("w0", 0, 1, False)  # w0 came back (an alive worker; it does not lead)
    status = _status(clock, tables, repo)
    assert status.gone_streams == ()
    assert _states(status)["g/sh0"] == "released"

    clock, tables, repo = _fleet()
    repo.heartbeat("w1", 0, 2, False)  # the stream is back: the leader's next beat removes it
    status = _status(clock, tables, repo)
    assert status.gone_streams == () and _states(status)["g/sh0"] == "released"
