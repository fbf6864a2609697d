"""import-kcl's pure parts: the liveness check on leaseCounter, and parents before children."""

from __future__ import annotations

import pytest

from consumer.kcl.cutover import _parents_first
from consumer.kcl.lease_table import KclLease, LiveKclFleetError, check_not_alive


def _lease(shard: str, counter: int, owner: str | None = "kcl-1", parents: tuple[str, ...] = ()) -> KclLease:
    return KclLease(shard, "s", shard, "TRIM_HORIZON", 0, parents, owner, counter)


def test_a_moving_counter_of_an_owned_lease_is_a_live_fleet() -> None:
    readings = iter([[_lease("a", 5), _lease("b", 7)], [_lease("a", 5), _lease("b", 8)]])
    slept: list[float] = []
    with pytest.raises(LiveKclFleetError, match=r"lease b of kcl-1: leaseCounter 7 -> 8 within 10s"):
        check_not_alive(lambda: next(readings), 10.0, slept.append)
    assert slept == [10.0]  # one failover time between the readings


def test_still_counters_or_unowned_leases_are_a_stopped_fleet() -> None:
    readings = iter(
        [[_lease("a", 5), _lease("b", 7, owner=None)], [_lease("a", 5), _lease("b", 9, owner=None)]]
    )
    after = check_not_alive(lambda: next(readings), 0.5, lambda _s: None)
    assert [lease.counter for lease in after] == [5, 9]


def test_parents_come_before_their_children() -> None:
    leases = [
        _lease("c", 0, parents=("b",)),
        _lease("a", 0),
        _lease("b", 0, parents=("a",)),
        _lease("d", 0, parents=("x",)),
    ]
    assert [lease.shard_id for lease in _parents_first(leases)] == ["a", "b", "c", "d"]
