"""A worker that gave a lease up is not handed leases back at once, on made-up time.

A worker that cannot reach Kinesis gives each of its shards up after ``give_up_after``; the leader assigned them
to the others, then at once asked those owners to hand the worker its fair share back, and each of those shards
stalled again until it gave up once more (in the audit every shard went 25-31 s without a batch during a 45 s
outage of one worker). For three lease durations after a give-up the worker is asked for by nobody and handed
nothing by a leader that gives a lease up or leaves; a free lease still goes to it when nobody else can take it.
"""

from __future__ import annotations

from dataclasses import replace

from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView

from .coordinator_support import LEASES, worker

T = 500.0
HOLD = 3 * LEASES.lease_duration


def shards(*owners: str | None) -> tuple[Lease, ...]:
    return tuple(Lease("s", f"sh{i}", owner=o, epoch=1 if o else 2) for i, o in enumerate(owners))


def scan(v: FleetView, ls: tuple[Lease, ...], now: float, beat: int) -> None:
    ws: tuple[WorkerItem, ...] = (worker("a", beat), worker("b", beat), worker("c", beat))
    v.observe(TableSnapshot(ls, ws), now)


def requests(v: FleetView, now: float) -> list[tuple[str, str]]:
    return [(lease.shard_id, to) for lease, to in v.plan(now).request]


def test_a_member_that_gave_its_leases_up_is_asked_for_by_nobody_for_three_lease_durations() -> None:
    v = FleetView("a", frozenset({"s"}), LEASES)  # the leader
    scan(v, shards("a", "a", "b", "b", "c", "c"), T, 1)
    # c cannot reach Kinesis: it gives both of its shards up (released, naming it); the plan assigns them to
    # the others, never back to c.
    gave = tuple(
        replace(x, owner=None, given_up_by="c") if x.owner == "c" else x
        for x in shards("a", "a", "b", "b", "c", "c")
    )
    scan(v, gave, T + 1, 2)
    p = v.plan(T + 1)
    assert sorted(to for _lease, to, _dead in p.assign) == ["a", "b"]
    assert v.held_off(T + 1) == {"c"}
    # Now a and b hold three each, c none: before, the next plan asked a and b to hand c its two back.
    after = shards("a", "a", "b", "b", "a", "b")
    for now in (T + 2, T + 5, T + HOLD):
        scan(v, after, now, int(now))
        assert requests(v, now) == []
        assert "c" not in v.successors(now)
    # Past the hold-off c gets its share again (if it still cannot read, it gives it up again).
    later = T + 1 + HOLD
    scan(v, after, later, int(later))
    assert sorted(to for _shard, to in requests(v, later)) == ["c", "c"]
    assert v.held_off(later) == frozenset() and "c" in v.successors(later)


def test_a_leader_that_gives_a_lease_up_hands_it_to_another_and_is_handed_none_back() -> None:
    v = FleetView("a", frozenset({"s"}), LEASES)
    ls = shards("a", "a", "b", "b", "c", "c")
    scan(v, ls, T - 1, 0)  # our term's first scan: b and c are seen alive once their heartbeats move
    scan(v, ls, T, 1)
    v.gave_up("a", T)  # told by the coordinator: the leader's own shard gave up
    assert v.hand_to(("shard#s#sh0",), T)["shard#s#sh0"] in {"b", "c"}
    moved = shards("b", "c", "b", "b", "c", "c")  # both of a's given up, handed on
    scan(v, moved, T + 1, 2)
    assert requests(v, T + 1) == []  # not asked back for a while
    scan(v, moved, T + HOLD + 1, 40)
    assert sorted(to for _shard, to in requests(v, T + HOLD + 1)) == ["a", "a"]


def test_a_free_lease_still_goes_to_a_held_off_worker_when_nobody_else_is_there() -> None:
    v = FleetView("a", frozenset({"s"}), LEASES)
    ls = (Lease("s", "sh0", owner=None, epoch=3, given_up_by="a"),)
    v.observe(TableSnapshot(ls, (worker("a", 1),)), T)
    assert [(x.shard_id, to) for x, to, _dead in v.plan(T).assign] == [("sh0", "a")]
