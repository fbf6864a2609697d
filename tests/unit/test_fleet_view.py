"""The leader's view of the fleet on made-up time: no decision reads a wall clock, its own or (through the
table's stamps) another worker's. Workers whose clocks are 90 s ahead or behind are live, get their share
and are handed leases; a hand-off's stall is timed by the leader that watches it."""

from __future__ import annotations

from consumer.leases.model import Lease
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.leader_duties import LeaderDuties
from consumer.lifecycle.messages import Metric

from .coordinator_support import LEASES, WALL, worker

T = 500.0
SKEW_MS = 90_000


def view() -> FleetView:
    return FleetView("a", frozenset({"s"}), LEASES)


def leases(n: int, owner: str | None = "a") -> tuple[Lease, ...]:
    return tuple(Lease("s", f"sh{i}", owner=owner, epoch=1 if owner else 0) for i in range(n))


def test_workers_with_skewed_wall_clocks_are_live_and_get_fair_shares() -> None:
    v = view()
    ahead, behind = worker("ahead", wall=WALL + SKEW_MS), worker("behind", wall=WALL - SKEW_MS)
    snap = TableSnapshot(leases(9), (worker("a"), ahead, behind))
    v.observe(TableSnapshot(leases(9), (worker("a"),)), T - 1)  # our first scan: they registered after it
    v.observe(snap, T)
    assert v.live(T) == {"a", "ahead", "behind"}
    plan = v.plan(T)
    assert sorted(to for _lease, to in plan.request) == ["ahead"] * 3 + ["behind"] * 3
    # Their heartbeats move (stamped by their own clocks, which may even go backwards): still live later.
    later = T + 3 * LEASES.lease_duration
    for i in range(1, 4):
        now = T + i * LEASES.lease_duration * 0.9
        v.observe(
            TableSnapshot(
                snap.leases,
                (
                    worker("a", 1 + i),
                    worker("ahead", 1 + i, wall=WALL + SKEW_MS),
                    worker("behind", 1 + i, wall=WALL - SKEW_MS - i),
                ),
            ),
            now,
        )
    assert v.live(later - LEASES.lease_duration * 0.2) == {"a", "ahead", "behind"}
    assert v.successors(later - LEASES.lease_duration * 0.2) == {"ahead", "behind"}


def test_a_worker_is_dead_when_its_heartbeat_stops_moving_whatever_its_stamps_say() -> None:
    v = view()
    v.observe(TableSnapshot(leases(2, "b"), (worker("a"), worker("b", wall=WALL + 10 * SKEW_MS))), T)
    assert "b" in v.live(T + LEASES.lease_duration * 0.5)
    v.observe(
        TableSnapshot(leases(2, "b"), (worker("a", 2), worker("b", wall=WALL + 10 * SKEW_MS))),
        T + LEASES.lease_duration,
    )
    assert "b" not in v.live(T + LEASES.lease_duration)  # counter unchanged for a lease duration: dead
    plan = v.plan(T + LEASES.lease_duration)
    assert {to for _lease, to, dead in plan.assign if dead is not None} == {"a"}


def test_a_handoff_stall_is_timed_by_the_leader_that_watches_it() -> None:
    asked = Lease("s", "sh0", owner="b", epoch=1, handoff_to="c", handoff_requested_ms=WALL - 10 * SKEW_MS)
    workers = (worker("a"), worker("b"), worker("c"))
    v = view()  # a new leader: the request's old wall stamp (another leader's clock) counts for nothing
    v.observe(TableSnapshot((asked,), workers), T)
    assert v.stalled_requests(T) == frozenset()
    assert v.plan(T).stalled == ()
    stall = LEASES.handoff_stall_after
    v.observe(TableSnapshot((asked,), workers), T + stall)
    assert v.stalled_requests(T + stall) == {asked.key}
    # A request to someone else is a new request: watched from when we saw it.
    other = Lease("s", "sh0", owner="b", epoch=1, handoff_to="a", handoff_requested_ms=WALL + SKEW_MS)
    v.observe(TableSnapshot((other,), workers), T + stall + 1)
    assert v.stalled_requests(T + stall + 1) == frozenset()


def test_a_leader_elected_again_times_each_request_from_its_new_term() -> None:
    asked = Lease("s", "sh0", owner="b", epoch=1, handoff_to="c")
    workers = (worker("a"), worker("b"), worker("c"))
    v = view()
    v.begin()
    v.observe(TableSnapshot((asked,), workers), T)  # we lead and see the request
    # We lose leadership; another leader leads (it may withdraw the request and ask again) until we lead again.
    back = T + 10 * LEASES.handoff_stall_after
    v.begin()
    v.observe(TableSnapshot((asked,), workers), back)
    assert v.stalled_requests(back) == frozenset()  # not the first term's timing: seen just now
    assert v.plan(back).stalled == ()
    stall = LEASES.handoff_stall_after
    v.observe(TableSnapshot((asked,), workers), back + stall)
    assert v.stalled_requests(back + stall) == {asked.key}


def test_a_stall_told_in_one_term_is_told_again_when_it_stalls_in_a_later_one() -> None:
    asked = Lease("s", "sh0", owner="b", epoch=1, handoff_to="c")
    stall = LEASES.handoff_stall_after
    duties = LeaderDuties("a", frozenset({"s"}), LEASES)

    def told(now: float) -> int:
        beat = int(now * 10)  # every heartbeat moves between two reads: all three stay alive
        snap = TableSnapshot((asked,), (worker("a", beat), worker("b", beat), worker("c", beat)))
        acts = duties.write(duties.on_table(snap, now, leaving=False), now)
        return sum(1 for x in acts if isinstance(x, Metric) and x.name == "HandoffsStalled")

    duties.begin(T, None)
    assert [told(T), told(T + stall), told(T + stall + 1)] == [0, 1, 0]  # told once in the term
    duties.end()
    back = T + 10 * stall
    duties.begin(back, None)
    assert [told(back), told(back + stall)] == [0, 1]  # watched afresh, and told again
