"""A leader asks nobody to hand a lease to a worker it has not seen alive, on made-up time.

A worker the leader's first scan shows (it has no history of it, or only a stale one from an earlier term) is
not yet proven dead, so its leases stay its own, but it is not seen alive either: a worker killed seconds
before looks the same for a lease duration. It is no target of a request and no successor until its heartbeat
is seen moving. A worker that registers after that first scan is seen alive at once (scale-out stays
immediate).
"""

from __future__ import annotations

from consumer.leases.fleet_plan import FleetInput, plan_fleet
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.messages import HeartbeatResult, Result, TableRead, WriteKind

from .coordinator_support import LEASES, T0, alive, coordinator, lead, owning, worker, writes

T = 500.0
LEASE = LEASES.lease_duration


def view() -> FleetView:
    return FleetView("a", frozenset({"s"}), LEASES)


def held(n: int, owner: str) -> tuple[Lease, ...]:
    return tuple(Lease("s", f"sh{i}", owner=owner, epoch=1) for i in range(n))


def snap(ls: tuple[Lease, ...], *workers: WorkerItem) -> TableSnapshot:
    return TableSnapshot(ls, workers)


def targets(v: FleetView, now: float) -> set[str]:
    p = v.plan(now)
    return {to for _lease, to in p.request} | {to for _lease, to, _dead in p.assign}


def test_a_new_leaders_first_scan_asks_no_live_owner_for_a_worker_it_has_not_seen_alive() -> None:
    v = view()  # a new leader: "d" was SIGKILLed seconds ago, "b" runs four shards
    v.observe(snap(held(4, "b"), worker("a"), worker("b"), worker("d", 7)), T)
    p = v.plan(T)
    assert "d" not in targets(v, T) and p.assign == ()
    assert v.live(T) == {"a", "b", "d"}  # not proven dead: its leases (none here) would stay its own
    assert v.seen_alive(T) == {"a"}
    assert [to for _lease, to in p.request] == ["a"]  # b above its share: only to us
    assert v.successors(T) == frozenset() and v.hand_to(("shard#s#x",), T) == {"shard#s#x": None}
    # b's heartbeat moves, d's does not: b is a target now, d still not.
    for i in range(1, 9):
        now = T + i
        v.observe(snap(held(4, "b"), worker("a", 1 + i), worker("b", 1 + i), worker("d", 7)), now)
        assert "d" not in targets(v, now)
        assert v.successors(now) == {"b"}
    # A lease duration of silence: d is dead, and the plan shares among a and b only.
    later = T + LEASE
    v.observe(snap(held(4, "b"), worker("a", 20), worker("b", 20), worker("d", 7)), later)
    assert "d" not in v.live(later)
    assert [to for _lease, to in v.plan(later).request] == ["a", "a"]


def test_a_worker_that_registers_after_the_first_scan_is_a_target_at_once() -> None:
    v = view()
    v.observe(snap(held(4, "b"), worker("a"), worker("b")), T)
    assert [to for _lease, to in v.plan(T).request] == ["a", "a"]
    # One scan later "n" has registered; b's heartbeat has not moved yet (it beats every few seconds).
    v.observe(snap(held(4, "b"), worker("a"), worker("b"), worker("n")), T + 1)
    assert v.seen_alive(T + 1) == {"a", "n"}
    assert sorted(to for _lease, to in v.plan(T + 1).request) == ["a", "n"]
    assert v.successors(T + 1) == {"n"}


def test_a_draining_owners_leases_wait_for_an_unproven_worker_rather_than_go_to_it_or_be_stranded() -> None:
    v = view()
    draining = worker("b", draining=True)
    v.observe(snap(held(2, "b"), worker("a"), draining, worker("d", 7)), T)
    p = v.plan(T)
    assert [to for _lease, to in p.request] == ["a"]  # our share; d's waits until d is seen alive or dead
    assert p.stranded == ()
    v.observe(snap(held(2, "b"), worker("a", 2), worker("b", 2, draining=True), worker("d", 8)), T + 4)
    assert sorted(to for _lease, to in v.plan(T + 4).request) == ["a", "d"]  # d moved: alive


def test_a_leader_elected_again_does_not_take_its_old_notes_for_a_heartbeat_seen_moving() -> None:
    v = view()
    v.observe(snap((), worker("a"), worker("b"), worker("d", 3)), T)
    v.observe(snap((), worker("a", 2), worker("b", 2), worker("d", 4)), T + 1)
    assert v.seen_alive(T + 1) == {"a", "b", "d"}
    # We lost leadership and lead again a minute later: d beat a few more times meanwhile, then was killed.
    v.begin()
    now = T + 60
    v.observe(snap(held(4, "b"), worker("a", 30), worker("b", 30), worker("d", 9)), now)
    assert "d" not in targets(v, now)
    assert "d" in v.live(now) and "d" not in v.seen_alive(now)
    assert v.successors(now) == frozenset()  # b too: its heartbeat moved before this term's first scan
    v.observe(snap(held(4, "b"), worker("a", 31), worker("b", 31), worker("d", 9)), now + 4)
    assert v.successors(now + 4) == {"b"} and "d" not in targets(v, now + 4)


def test_a_worker_missing_from_one_read_is_not_taken_for_a_new_one_when_it_is_back_unmoved() -> None:
    v = view()
    v.observe(snap((), worker("a"), worker("d", 7)), T)
    v.observe(snap((), worker("a", 2)), T + 1)  # an eventually consistent read that missed d's item
    v.observe(snap(held(2, "a"), worker("a", 3), worker("d", 7)), T + 2)
    assert "d" not in targets(v, T + 2) and "d" not in v.seen_alive(T + 2)


def test_plan_fleet_shares_with_unproven_workers_but_asks_only_for_live_ones() -> None:
    leases = held(6, "b")
    inp = FleetInput(
        leases=leases,
        live=frozenset({"a", "b"}),
        draining=frozenset(),
        dead_owners={},
        unproven=frozenset({"d"}),
    )
    p = plan_fleet(inp)
    assert p.targets == {"a": 2, "b": 2, "d": 2}
    assert [to for _lease, to in p.request] == ["a", "a"]
    # A request already in the table to an unproven worker stands (the leader that made it saw it alive).
    asked = (Lease("s", "sh0", owner="b", epoch=1, handoff_to="d"), *leases[1:])
    assert plan_fleet(FleetInput(asked, inp.live, inp.draining, {}, unproven=inp.unproven)).withdraw == ()
    # Free leases still go to unproven workers too (docs/protocol.md: the first lease duration's caveat).
    free = tuple(Lease("s", f"f{i}") for i in range(3))
    assert {
        to
        for _l, to, _d in plan_fleet(
            FleetInput(free, inp.live, inp.draining, {}, unproven=inp.unproven)
        ).assign
    } == {"a", "b", "d"}


def test_a_new_leader_stepped_on_made_up_time_hands_nothing_to_a_worker_killed_before_it_led() -> None:
    c = coordinator()
    alive(c)
    lead(c, T0 + 1)
    mine = owning(c, now=T0 + 1.2)
    other = Lease("s", "sh1", owner="a", epoch=1)
    owning(c, "sh1", now=T0 + 1.3)
    # The first read: we run two shards, "d" (killed seconds ago) has an item and nothing else.
    first = TableRead(TableSnapshot((mine, other), (worker("a"), worker("d", 7))))
    acts = c.step(T0 + 1.5, [first])
    assert not writes(acts, WriteKind.REQUEST)
    for t in range(2, 11):
        c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)])
        read = TableRead(TableSnapshot((mine, other), (worker("a", t), worker("d", 7))))
        assert not writes(c.step(T0 + t + 0.5, [read]), WriteKind.REQUEST)
    # A worker that registers now is asked for at once.
    c.step(T0 + 11, [HeartbeatResult(T0 + 11, Result.OK)])
    read = TableRead(TableSnapshot((mine, other), (worker("a", 11), worker("d", 7), worker("n"))))
    assert [w.to for w in writes(c.step(T0 + 11.5, [read]), WriteKind.REQUEST)] == ["n"]
