"""``status`` of a reshard's children: a child nobody owns while a parent has not ended is ``waiting for
<parent>`` (the planner's ``ready_leases`` rule), not ``released``; ``--json`` gives its ``parents``; the live
view keeps it readable at 80 columns."""

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
from consumer.leases.planner import ready_leases
from tests.unit.test_cli_watch_width import _column, _whole

P0, P1 = "shardId-000000000000", "shardId-000000000001"
C2, C3, M4, ORPHAN = "shardId-000000000002", "shardId-000000000003", "shardId-000000000004", "shardId-9"
W1 = "ip-10-0-1-23.ec2.internal-12345-a1b2c3"


def _tables() -> tuple[InMemoryTables, InMemoryLeaseRepository]:
    clock = FakeClock(1_700_000_000.0)
    tables = InMemoryTables(clock=clock)
    repo = InMemoryLeaseRepository(tables)
    repo.register_worker(WorkerItem(W1, started_ms=clock.wall_ms()))
    repo.create_lease(Lease("s", P0))
    repo.create_lease(Lease("s", P1))
    repo.create_lease(Lease("s", C2, parents=(P0,)))  # a split of P0
    repo.create_lease(Lease("s", C3, parents=(P0,)))
    repo.create_lease(Lease("s", M4, parents=(P0, P1)))  # a merge of P0 and P1
    repo.create_lease(Lease("s", ORPHAN, parents=("shardId-gone",)))  # its parent's lease retired
    repo.take(Lease("s", P0), W1, None)  # P0 is being read; P1 has ended
    repo.mark_ended(repo.take(Lease("s", P1), W1, None))
    return tables, repo


def _status(tables: InMemoryTables, repo: InMemoryLeaseRepository) -> FleetStatus:
    return fleet_status(repo, stored_checkpoints(InMemoryCheckpointStore(tables)), now_ms=1_700_000_000_000)


def test_a_child_whose_parent_has_not_ended_is_waiting_for_it() -> None:
    tables, repo = _tables()
    status = _status(tables, repo)
    by_shard = {x.shard_id: x for x in status.leases}
    assert by_shard[P0].state == "running" and by_shard[P1].state == "ended"
    for child in (C2, C3, M4):  # before: "released", as if the leader were to assign it next
        assert by_shard[child].state == "waiting", by_shard[child]
        assert by_shard[child].waiting_for == (P0,)
        assert by_shard[child].detail == f"waiting for {P0}"
        assert by_shard[child].lag_note == "no owner"
    assert by_shard[M4].parents == (P0, P1)  # P1 has ended: only P0 is waited for
    assert by_shard[ORPHAN].state == "released"  # a parent gone holds nothing back
    # The same rule as the leader's: exactly the leases it may assign are not waiting.
    ready = {x.shard_id for x in ready_leases(repo.snapshot().leases)}
    assert {x.shard_id for x in status.leases if x.state not in {"waiting", "ended"}} == ready


def test_once_the_parent_ends_its_children_are_released() -> None:
    tables, repo = _tables()
    [p0] = [x for x in repo.snapshot().leases if x.shard_id == P0]
    repo.mark_ended(p0)
    states = {x.shard_id: x.state for x in _status(tables, repo).leases}
    assert states == {
        P0: "ended",
        P1: "ended",
        C2: "released",
        C3: "released",
        M4: "released",
        ORPHAN: "released",
    }


def test_the_text_and_json_name_the_parent() -> None:
    tables, repo = _tables()
    status = _status(tables, repo)
    out = io.StringIO()
    _print_status(status, out)
    rows = [line for line in out.getvalue().splitlines() if line.split()[:2] == ["s", C2]]
    assert len(rows) == 1 and f"waiting for {P0}" in rows[0], out.getvalue()
    doc = json.loads(json.dumps(asdict(status)))  # what `status --json` prints
    leases = {x["shard_id"]: x for x in doc["leases"]}
    assert leases[M4]["parents"] == [P0, P1] and leases[M4]["waiting_for"] == [P0]
    assert leases[M4]["state"] == "waiting"
    assert leases[P0]["parents"] == [] and leases[P0]["waiting_for"] == []


def test_the_live_view_shows_what_a_child_waits_for_within_80_columns() -> None:
    tables, repo = _tables()
    out = io.StringIO()
    Console(width=80, file=out, color_system=None, force_terminal=False).print(
        render(_status(tables, repo), 80)
    )
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    states = _column(text, "shards", "state", "shard")
    assert states[2].startswith("waiting for")  # the state's words on its first line
    assert _whole(states) == ["running", "ended", *[f"waitingfor{P0}"] * 3, "released"], text
