"""A fleet consuming several streams spreads them over its workers, on made-up time. Each stream is planned on
its own, and its ``n % w`` extra leases used to go to the workers already holding the most of it, ties by
name: three one-shard streams and three workers put all three on one worker (the audit: 3/0/0, and scaling
out changed nothing). The extras now go to the workers holding the fewest of the other streams."""

from __future__ import annotations

from dataclasses import replace

from consumer.leases.model import Lease
from consumer.leases.planner import fair_shares
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from tests.unit.coordinator_support import LEASES, worker

T = 500.0
STREAMS = frozenset({"a", "b", "c"})


def _view(leases: tuple[Lease, ...], workers: tuple[str, ...] = ("w1", "w2", "w3")) -> FleetView:
    v = FleetView(workers[0], STREAMS, LEASES)
    for now, beat in ((T - 1, 0), (T, 1)):  # the term's first scan, then every heartbeat moves
        items = tuple(replace(worker(w, beat), streams=STREAMS) for w in workers)
        v.observe(TableSnapshot(leases, items), now)
    return v


def test_extras_go_to_the_workers_holding_fewest_elsewhere() -> None:
    assert fair_shares(1, {"w1": 0, "w2": 0, "w3": 0}, elsewhere={"w1": 2, "w2": 0, "w3": 1}) == {
        "w1": 0,
        "w2": 1,
        "w3": 0,
    }
    # Without other streams: as before, the holders keep theirs (no move).
    assert fair_shares(5, {"a": 3, "b": 0}) == {"a": 3, "b": 2}
    assert fair_shares(1, {"w1": 0, "w2": 1}, elsewhere={"w1": 1, "w2": 1}) == {"w1": 0, "w2": 1}


def test_three_one_shard_streams_go_to_three_workers() -> None:
    free = tuple(Lease(s, "sh0") for s in sorted(STREAMS))
    p = _view(free).plan(T)
    assert sorted(to for _lease, to, _dead in p.assign) == ["w1", "w2", "w3"]


def test_a_fleet_that_holds_them_all_on_one_worker_spreads_them_and_then_stays() -> None:
    piled = tuple(Lease(s, "sh0", owner="w1", epoch=1) for s in sorted(STREAMS))
    p = _view(piled).plan(T)
    assert sorted(to for _lease, to in p.request) == ["w2", "w3"]  # two asked away, one stays
    spread = (
        Lease("a", "sh0", owner="w2", epoch=2),
        Lease("b", "sh0", owner="w3", epoch=2),
        Lease("c", "sh0", owner="w1", epoch=1),
    )
    again = _view(spread).plan(T)
    assert not again.request and not again.assign  # balanced: nothing moves


def test_one_stream_is_planned_as_before() -> None:
    v = FleetView("w1", frozenset({"a"}), LEASES)
    leases = (
        Lease("a", "sh0", owner="w1", epoch=1),
        Lease("a", "sh1", owner="w1", epoch=1),
        Lease("a", "sh2"),
    )
    for now, beat in ((T - 1, 0), (T, 1)):
        items = tuple(replace(worker(w, beat), streams=frozenset({"a"})) for w in ("w1", "w2"))
        v.observe(TableSnapshot(leases, items), now)
    p = v.plan(T)
    assert [to for _lease, to, _dead in p.assign] == ["w2"]
    assert not p.request  # w1 keeps its two: the extra stays with the holder
