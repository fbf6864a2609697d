"""Workers that list different streams (a rolling deploy that adds or removes one), on made-up time: a lease is
handed on only to a worker that consumes its stream, and a worker handed one of a stream it does not consume
(by a worker of another version) hands it on unread. Before, a leader whose shard of a deleted stream failed
handed it to a worker of the new version, which did not list that stream, and that worker died with a bare
``StopIteration`` (exit 1), taking its other shards with it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from consumer.leases.model import Lease, stream_of
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.messages import LeaseWrite, Start, WriteKind
from tests.unit.coordinator_support import LEASES, T0, alive, coordinator, given, of, worker

T = 500.0


def _view(b_streams: frozenset[str], c_streams: frozenset[str]) -> FleetView:
    """Leader a consumes s and t; b and c consume what they are given; all seen alive."""
    v = FleetView("a", frozenset({"s", "t"}), LEASES)
    leases = (Lease("s", "sh0", owner="a", epoch=1), Lease("t", "sh0", owner="a", epoch=1))
    for now, beat in ((T - 1, 0), (T, 1)):  # the term's first scan, then the heartbeats move
        items = (
            replace(worker("a", beat), streams=frozenset({"s", "t"})),
            replace(worker("b", beat), streams=b_streams),
            replace(worker("c", beat), streams=c_streams),
        )
        v.observe(TableSnapshot(leases, items), now)
    return v


def test_a_lease_is_handed_only_to_a_worker_that_consumes_its_stream() -> None:
    v = _view(frozenset({"s"}), frozenset({"s", "t"}))
    assert v.hand_to(("shard#t#sh0",), T) == {"shard#t#sh0": "c"}
    assert v.hand_to(("shard#s#sh0", "shard#t#sh0"), T) == {"shard#s#sh0": "b", "shard#t#sh0": "c"}


def test_nobody_else_consumes_it_so_it_is_released_for_the_leader_to_assign() -> None:
    v = _view(frozenset({"s"}), frozenset({"s"}))  # the new version dropped t
    assert v.hand_to(("shard#t#sh0",), T) == {"shard#t#sh0": None}
    assert v.hand_to(("shard#s#sh0",), T)["shard#s#sh0"] in {"b", "c"}


def test_a_worker_handed_a_lease_of_a_stream_it_does_not_consume_hands_it_on_unread() -> None:
    c = coordinator()  # consumes s only
    alive(c)
    theirs = Lease("t", "sh0", owner="a", epoch=4)
    acts = given(c, theirs, T0)
    assert not of(acts, Start)
    [write] = of(acts, LeaseWrite)
    assert (write.kind, write.lease, write.to) == (WriteKind.RELEASE, theirs, None)
    # Its own stream's leases still start.
    mine = Lease("s", "sh1", owner="a", epoch=2)
    assert Start(mine) in given(c, mine, T0 + 1, inbox=2)


@pytest.mark.parametrize("key", ["shard#s#shardId-000000000000", "shard#my-stream.v2#sh"])
def test_stream_of_a_lease_key(key: str) -> None:
    assert stream_of(key) == key.split("#")[1]
    assert stream_of(Lease(stream_of(key), "x").key) == stream_of(key)
