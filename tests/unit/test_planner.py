"""The leader's fleet plan (consumer/leases/fleet_plan.py): pure, so whole fleets are simulated here."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.fleet_plan import FleetInput, FleetPlan, plan_fleet
from consumer.leases.model import Lease, LeaseState
from consumer.leases.planner import fair_shares, ready_leases
from consumer.leases.repository import OwnerObservation


def leases(n: int, owners: list[str | None] | None = None) -> tuple[Lease, ...]:
    owners = owners or [None] * n
    return tuple(Lease("s", f"sh{i:02d}", owner=owners[i], epoch=1 if owners[i] else 0) for i in range(n))


def inp(ls: tuple[Lease, ...], live: set[str], **kw) -> FleetInput:
    return FleetInput(
        leases=ls,
        live=frozenset(live),
        draining=frozenset(kw.pop("draining", set())),
        dead_owners=kw.pop("dead", {}),
        stalled_requests=frozenset(kw.pop("stalled", ())),
        **kw,
    )


def test_fair_shares_give_extras_to_current_holders() -> None:
    assert fair_shares(5, {"a": 3, "b": 0}) == {"a": 3, "b": 2}
    assert fair_shares(2, {"a": 1, "b": 1, "c": 0}) == {"a": 1, "b": 1, "c": 0}
    assert fair_shares(8, {"a": 0}, max_leases=3) == {"a": 3}


def test_unowned_leases_are_assigned_evenly_at_once() -> None:
    p = plan_fleet(inp(leases(5), {"a", "b"}))
    assert Counter(to for _, to, _ in p.assign) == {"a": 3, "b": 2} or Counter(
        to for _, to, _ in p.assign
    ) == {"a": 2, "b": 3}
    assert not p.request


def test_a_living_owner_is_only_ever_asked_never_taken_from() -> None:
    p = plan_fleet(inp(leases(8, ["a"] * 8), {"a", "b"}))
    assert not p.assign
    assert [to for _, to in p.request] == ["b"] * 4
    assert all(x.owner == "a" for x, _ in p.request)


def test_requests_under_way_count_and_stale_ones_are_withdrawn() -> None:
    ls = list(leases(4, ["a"] * 4))
    ls[0] = replace(ls[0], handoff_to="b")
    ls[1] = replace(ls[1], handoff_to="b")
    assert not plan_fleet(inp(tuple(ls), {"a", "b"})).request  # b gets its two
    ls[2] = replace(ls[2], handoff_to="gone")
    ls[3] = replace(ls[3], handoff_to="d")
    p = plan_fleet(inp(tuple(ls), {"a", "b", "d"}, draining={"d"}))
    assert {x.shard_id for x in p.withdraw} == {"sh02", "sh03"}


def test_dead_owners_leases_are_assigned_with_the_observation_that_fences_it() -> None:
    obs = OwnerObservation("x", 41)
    p = plan_fleet(inp(leases(2, ["x", "x"]), {"a"}, dead={"x": obs}))
    assert [(to, o) for _, to, o in p.assign] == [("a", obs), ("a", obs)]


def test_a_request_to_an_owner_that_died_gives_way_to_the_dead_owners_assignment() -> None:
    # The audit's table: w10 was asked to hand sh03 to w11, then exited (drained or killed) with the request
    # unanswered; w11 and w12 were at their shares. The request used to count as w11's lease under way, so
    # nobody ever took sh03: it was read by nobody until the fleet changed size.
    ls = list(leases(4, ["w12", "w11", "w12", "w10"]))
    ls[3] = replace(ls[3], handoff_to="w11")
    obs = OwnerObservation("w10", None)
    p = plan_fleet(inp(tuple(ls), {"w11", "w12"}, dead={"w10": obs}))
    assert [(x.shard_id, to, o) for x, to, o in p.assign] == [("sh03", "w11", obs)]
    assert not p.withdraw and not p.request  # the take clears the request: no write of its own
    # Not yet seen dead: the request still stands (its owner may yet answer it).
    assert plan_fleet(inp(tuple(ls), {"w11", "w12"})).assign == ()


def test_an_owner_not_yet_seen_dead_keeps_its_leases() -> None:
    assert plan_fleet(inp(leases(2, ["x", "x"]), {"a"})) == FleetPlan(targets={"a": 2})


def test_a_draining_workers_leases_are_asked_for_first_and_stranded_when_nobody_is_left() -> None:
    ls = leases(4, ["d", "d", "a", "a"])
    p = plan_fleet(inp(ls, {"a", "b", "d"}, draining={"d"}))
    assert sorted((x.shard_id, to) for x, to in p.request) == [("sh00", "b"), ("sh01", "b")]
    p = plan_fleet(inp(ls, {"d"}, draining={"d"}))
    assert [x.shard_id for x in p.stranded] == ["sh00", "sh01"]


def test_a_lease_given_up_on_goes_to_another_worker_when_there_is_one() -> None:
    lease = replace(Lease("s", "sh0"), given_up_by="a")
    assert [to for _, to, _ in plan_fleet(inp((lease,), {"a", "b"})).assign] == ["b"]
    assert [to for _, to, _ in plan_fleet(inp((lease,), {"a"})).assign] == ["a"]


def test_standby_worker_gets_nothing_when_shards_are_fewer() -> None:
    p = plan_fleet(inp(leases(2, ["a", "b"]), {"a", "b", "c"}))
    assert not p.moves and p.targets == {"a": 1, "b": 1, "c": 0}


def test_children_wait_for_every_parent_to_end() -> None:
    parent_a = Lease("s", "p1", owner="a", epoch=1)
    parent_b = Lease("s", "p2", state=LeaseState.ENDED)
    child = Lease("s", "c1", parents=("p1", "p2"))
    assert [x.shard_id for x in ready_leases((parent_a, parent_b, child))] == ["p1"]
    ended = replace(parent_a, state=LeaseState.ENDED)
    assert [x.shard_id for x in ready_leases((ended, parent_b, child))] == ["c1"]
    assert [x.shard_id for x in ready_leases((child,))] == ["c1"]  # a retired parent does not block


def test_stalled_request_is_reported() -> None:
    ls = (Lease("s", "a1", owner="a", epoch=3, handoff_to="b", handoff_requested_ms=1000),)
    p = plan_fleet(inp(ls, {"a", "b"}, stalled={ls[0].key}))
    assert [x.shard_id for x in p.stalled] == ["a1"]
    assert plan_fleet(inp(ls, {"a", "b"})).stalled == ()  # not watched long enough by this leader


def test_a_plan_never_writes_more_than_its_budget() -> None:
    p = plan_fleet(inp(leases(500), {"a", "b"}, max_moves=100))
    assert len(p.assign) == 100 and p.truncated


# -- a fleet simulation: the leader's plans applied (owners give when asked) until nothing changes ----------
def simulate(ls: dict[str, Lease], workers: list[str], dead: frozenset[str] = frozenset()) -> Counter[str]:
    moves: Counter[str] = Counter()
    for _round in range(50):
        p = plan_fleet(inp(tuple(ls.values()), set(workers), dead={d: OwnerObservation(d, 0) for d in dead}))
        for lease, to, _ in p.assign:
            ls[lease.shard_id] = replace(lease, owner=to, epoch=lease.epoch + 1, given_up_by=None)
            moves[lease.shard_id] += 1
        for lease, to in p.request:
            ls[lease.shard_id] = replace(lease, handoff_to=to)
        for lease in p.withdraw:
            ls[lease.shard_id] = replace(lease, handoff_to=None)
        asked = [x for x in ls.values() if x.handoff_to is not None]
        for lease in asked:  # every owner hands on what it was asked for
            ls[lease.shard_id] = replace(
                lease, owner=lease.handoff_to, epoch=lease.epoch + 1, handoff_to=None
            )
            moves[lease.shard_id] += 1
        if not p.moves and not asked:
            return moves
    raise AssertionError("did not converge")


def counts(ls: dict[str, Lease]) -> Counter[str | None]:
    return Counter(x.owner for x in ls.values())


def test_fresh_fleet_converges_balanced() -> None:
    ls = {x.shard_id: x for x in leases(8)}
    moves = simulate(ls, ["a", "b"])
    assert counts(ls) == {"a": 4, "b": 4}
    assert max(moves.values()) == 1


@pytest.mark.parametrize(
    ("shards", "before", "after"), [(8, 2, 4), (8, 4, 8), (6, 2, 3), (16, 3, 5), (8, 1, 2), (64, 8, 12)]
)
def test_scale_out_moves_each_shard_at_most_once_and_only_what_it_must(shards, before, after) -> None:
    workers = [f"w{i}" for i in range(after)]
    ls = {x.shard_id: x for x in leases(shards)}
    simulate(ls, workers[:before])
    moves = simulate(ls, workers)
    c = counts(ls)
    assert max(c.values()) - min(c.values()) <= 1 and sum(c.values()) == shards
    assert max(moves.values()) == 1
    held = sorted(Counter(x.owner for x in ls.values() if x.owner in workers[:before]).values())
    assert sum(moves.values()) == shards - sum(held)


def test_dead_worker_leases_move_once_and_others_stay() -> None:
    ls = {x.shard_id: x for x in leases(9)}
    simulate(ls, ["a", "b", "c"])
    before = {k: v.owner for k, v in ls.items()}
    moves = simulate(ls, ["a", "b"], dead=frozenset({"c"}))
    assert set(moves) == {k for k, o in before.items() if o == "c"}
    assert counts(ls) in ({"a": 5, "b": 4}, {"a": 4, "b": 5})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", "x", None]), min_size=1, max_size=12),
    st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
    st.sets(st.sampled_from(["a", "b", "c"])),
)
def test_no_plan_ever_assigns_a_living_owners_lease(owners, live, draining) -> None:
    ls = leases(len(owners), owners)
    p = plan_fleet(inp(ls, live, draining=draining, dead={"x": OwnerObservation("x", 0)}))
    assert all(x.owner is None or x.owner not in live for x, _, _ in p.assign)
    assert all(to in live - draining for _, to, _ in p.assign)
    assert all(x.owner in live and to in live - draining and to != x.owner for x, to in p.request)
