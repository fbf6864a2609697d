from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.leases.model import Lease, LeaseState
from consumer.leases.planner import PlanInput, fair_shares, plan, ready_leases
from consumer.leases.repository import OwnerObservation


def leases(n: int, owners: list[str | None] | None = None) -> tuple[Lease, ...]:
    owners = owners or [None] * n
    return tuple(Lease("s", f"sh{i:02d}", owner=owners[i], epoch=1 if owners[i] else 0) for i in range(n))


def inp(me: str, ls: tuple[Lease, ...], live: set[str], **kw) -> PlanInput:
    return PlanInput(
        me=me,
        leases=ls,
        live_workers=frozenset(live),
        draining_workers=frozenset(kw.pop("draining", set())),
        dead_owners=kw.pop("dead", {}),
        now_ms=kw.pop("now_ms", 0),
        handoff_stall_ms=kw.pop("stall", 20_000),
        **kw,
    )


def test_fair_shares_give_extras_to_current_holders() -> None:
    assert fair_shares(5, {"a": 3, "b": 0}) == {"a": 3, "b": 2}
    assert fair_shares(2, {"a": 1, "b": 1, "c": 0}) == {"a": 1, "b": 1, "c": 0}
    assert fair_shares(8, {"a": 0}, max_leases=3) == {"a": 3}


def test_single_worker_takes_everything() -> None:
    p = plan(inp("a", leases(4), {"a"}))
    assert len(p.take) == 4 and not p.request


def test_never_takes_from_a_living_owner_only_asks() -> None:
    ls = leases(8, ["a"] * 8)
    p = plan(inp("b", ls, {"a", "b"}))
    assert not p.take and not p.steal
    assert len(p.request) == 4
    assert all(x.owner == "a" for x in p.request)


def test_owner_above_share_gives_requested_lease_and_declines_the_rest() -> None:
    ls = list(leases(4, ["a"] * 4))
    ls[0] = replace(ls[0], handoff_to="b")
    ls[1] = replace(ls[1], handoff_to="b")
    ls[2] = replace(ls[2], handoff_to="b")
    p = plan(inp("a", tuple(ls), {"a", "b"}))
    assert [(lease.shard_id, to) for lease, to in p.give] == [("sh00", "b"), ("sh01", "b")]
    assert [x.shard_id for x in p.decline] == ["sh02"]


def test_request_from_dead_or_draining_requester_is_declined() -> None:
    ls = list(leases(4, ["a"] * 4))
    ls[0] = replace(ls[0], handoff_to="gone")
    ls[1] = replace(ls[1], handoff_to="d")
    p = plan(inp("a", tuple(ls), {"a", "d"}, draining={"d"}))
    assert not p.give
    assert {x.shard_id for x in p.decline} == {"sh00", "sh01"}


def test_dead_owner_is_stolen_from_with_its_observation() -> None:
    obs = OwnerObservation("x", 41)
    p = plan(inp("a", leases(2, ["x", "x"]), {"a"}, dead={"x": obs}))
    assert [o for _, o in p.steal] == [obs, obs]


def test_standby_worker_takes_nothing_when_shards_are_fewer() -> None:
    ls = leases(2, ["a", "b"])
    p = plan(inp("c", ls, {"a", "b", "c"}))
    assert p.empty
    assert p.targets == {"a": 1, "b": 1, "c": 0}


def test_children_wait_for_every_parent_to_end() -> None:
    parent_a = Lease("s", "p1", owner="a", epoch=1)
    parent_b = Lease("s", "p2", state=LeaseState.ENDED)
    child = Lease("s", "c1", parents=("p1", "p2"))
    assert [x.shard_id for x in ready_leases((parent_a, parent_b, child))] == ["p1"]
    ended = replace(parent_a, state=LeaseState.ENDED)
    assert [x.shard_id for x in ready_leases((ended, parent_b, child))] == ["c1"]
    # A parent retired from the table (aged out) does not block its children.
    assert [x.shard_id for x in ready_leases((child,))] == ["c1"]


def test_stalled_request_is_reported() -> None:
    ls = (Lease("s", "a1", owner="a", epoch=3, handoff_to="b", handoff_requested_ms=1000),)
    p = plan(inp("b", ls, {"a", "b"}, now_ms=30_000, stall=20_000))
    assert [x.shard_id for x in p.stalled] == ["a1"]


def test_pending_requests_count_against_the_deficit() -> None:
    ls = list(leases(4, ["a"] * 4))
    ls[0] = replace(ls[0], handoff_to="b")
    ls[1] = replace(ls[1], handoff_to="b")
    assert not plan(inp("b", tuple(ls), {"a", "b"})).request


# -- a fleet simulation: plans applied one worker at a time until nothing changes ------------------
def simulate(ls: dict[str, Lease], workers: list[str], dead: set[str] = frozenset()) -> Counter[str]:
    """Apply plans until quiescent; return how many times each shard changed owner."""
    moves: Counter[str] = Counter()
    for _round in range(50):
        changed = False
        for w in workers:
            snapshot = tuple(ls.values())
            p = plan(inp(w, snapshot, set(workers), dead={d: OwnerObservation(d, 0) for d in dead}))
            for lease in p.take:
                ls[lease.shard_id] = replace(lease, owner=w, epoch=lease.epoch + 1)
                moves[lease.shard_id] += 1
            for lease, _ in p.steal:
                ls[lease.shard_id] = replace(lease, owner=w, epoch=lease.epoch + 1)
                moves[lease.shard_id] += 1
            for lease in p.request:
                ls[lease.shard_id] = replace(ls[lease.shard_id], handoff_to=w)
            for lease, to in p.give:
                ls[lease.shard_id] = replace(lease, owner=to, epoch=lease.epoch + 1, handoff_to=None)
                moves[lease.shard_id] += 1
            for lease in p.decline:
                ls[lease.shard_id] = replace(ls[lease.shard_id], handoff_to=None)
            changed |= not p.empty
        if not changed:
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
    ("shards", "before", "after"), [(8, 2, 4), (8, 4, 8), (6, 2, 3), (16, 3, 5), (8, 1, 2)]
)
def test_scale_out_moves_each_shard_at_most_once_and_only_what_it_must(shards, before, after) -> None:
    workers = [f"w{i}" for i in range(after)]
    ls = {x.shard_id: x for x in leases(shards)}
    simulate(ls, workers[:before])
    moves = simulate(ls, workers)
    c = counts(ls)
    assert max(c.values()) - min(c.values()) <= 1 and sum(c.values()) == shards
    assert max(moves.values()) == 1
    base, extra = divmod(shards, before)
    must_move = shards - sum(
        min(base + (i < extra), shards // after + (i < shards % after)) for i in range(before)
    )
    assert sum(moves.values()) == must_move


def test_dead_worker_leases_move_once_and_others_stay() -> None:
    ls = {x.shard_id: x for x in leases(9)}
    simulate(ls, ["a", "b", "c"])
    before = {k: v.owner for k, v in ls.items()}
    moves = simulate(ls, ["a", "b"], dead={"c"})
    assert set(moves) == {k for k, o in before.items() if o == "c"}
    assert counts(ls) in ({"a": 5, "b": 4}, {"a": 4, "b": 5})


def test_more_workers_than_shards_leaves_warm_standbys_that_take_over() -> None:
    ls = {x.shard_id: x for x in leases(2)}
    simulate(ls, ["a", "b", "c", "d"])
    owners = set(counts(ls))
    standbys = {"a", "b", "c", "d"} - owners
    assert len(standbys) == 2
    victim = next(iter(owners))
    simulate(ls, [w for w in ["a", "b", "c", "d"] if w != victim], dead={victim})
    assert victim not in counts(ls) and len(counts(ls)) == 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=12),
    st.sets(st.sampled_from(["a", "b", "c"]), min_size=1),
    st.sampled_from(["a", "b", "c"]),
)
def test_no_plan_ever_takes_from_a_living_owner(owners, live, me) -> None:
    ls = leases(len(owners), owners)
    p = plan(inp(me, ls, live | {me}))
    taken = [x for x in p.take] + [x for x, _ in p.steal]
    assert all(x.owner is None or x.owner not in live | {me} for x in taken)
    assert all(x.owner != me for x in p.request)
    assert all(x.owner == me for x, _ in p.give)
