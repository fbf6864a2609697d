"""The clockless liveness classes, directly: our own window, and what we saw of the others."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from consumer.clock import FakeClock
from consumer.leases.liveness import LivenessTracker, OwnValidity
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.planner import plan_shutdown
from consumer.leases.repository import OwnerObservation


def test_own_validity_runs_from_the_heartbeats_send_time_and_never_shrinks() -> None:
    clock = FakeClock(100.0)
    v = OwnValidity(clock, 8.0)
    assert not v.valid()
    v.extend(99.0)  # sent before now: the window counts from the send, not from the answer
    assert v.valid() and v.remaining() == 7.0
    v.extend(98.0)  # a late answer to an older heartbeat does not shorten it
    assert v.remaining() == 7.0
    clock.advance(7.0)
    assert not v.valid()
    v.extend(clock.monotonic())
    assert v.valid() and v.lapses == 2  # the window closed in between: a second opening


def test_a_worker_is_alive_while_its_heartbeat_moved_within_a_lease_duration() -> None:
    t = LivenessTracker(10.0)
    t.observe((WorkerItem("a", heartbeat=1),), (), now=0.0)
    assert t.is_alive("a", 9.99) and not t.is_alive("a", 10.0)
    t.observe((WorkerItem("a", heartbeat=2),), (), now=10.5)
    assert t.is_alive("a", 20.0) and t.silent_for("a", 20.0) == 9.5
    assert not t.is_alive("never-seen", 0.0) and t.silent_for("never-seen", 5.0) == 0.0


def test_a_dead_owner_is_named_with_the_heartbeat_seen_only_after_a_full_lease_duration() -> None:
    t = LivenessTracker(10.0)
    lease = Lease("s", "sh", owner="a", epoch=1)
    t.observe((WorkerItem("a", heartbeat=7),), (lease,), now=0.0)
    assert t.dead_owner("a", 9.9) is None
    assert t.dead_owner("a", 10.0) == OwnerObservation("a", 7)


def test_an_owner_without_a_worker_item_is_dead_after_a_lease_duration_of_absence() -> None:
    t = LivenessTracker(10.0)
    lease = Lease("s", "sh", owner="gone", epoch=1)
    t.observe((), (lease,), now=0.0)
    t.observe((), (lease,), now=5.0)  # still absent: counted from the first time
    assert t.dead_owner("gone", 9.9) is None
    assert t.dead_owner("gone", 10.0) == OwnerObservation("gone", None)
    t.observe((WorkerItem("gone", heartbeat=1),), (lease,), now=10.0)  # it came back
    assert t.dead_owner("gone", 15.0) is None


def test_a_worker_whose_item_disappears_is_forgotten() -> None:
    t = LivenessTracker(10.0)
    t.observe((WorkerItem("a", heartbeat=1),), (), now=0.0)
    t.observe((), (), now=1.0)
    assert not t.is_alive("a", 1.0) and t.dead_owner("a", 100.0) is None


@given(
    loads=st.dictionaries(st.sampled_from("bcdef"), st.integers(0, 5), max_size=5),
    mine=st.integers(0, 12),
)
def test_shutdown_successors_balance_the_leases_over_the_least_loaded(
    loads: dict[str, int], mine: int
) -> None:
    leases = tuple(Lease("s", f"{w}{i}", owner=w, epoch=1) for w, n in loads.items() for i in range(n))
    keys = tuple(f"shard#s#a{i}" for i in range(mine))
    chosen = plan_shutdown("a", leases, frozenset(loads), keys)
    assert set(chosen) == set(keys)
    if not loads:
        assert all(to is None for to in chosen.values())
        return
    after = dict(loads)
    for to in chosen.values():
        assert to is not None
        after[to] += 1
    receivers = {to for to in chosen.values()}
    # nobody who received a lease ends with more than one above the least loaded worker after the hand-off
    assert all(after[w] <= min(after.values()) + 1 for w in receivers)


def test_a_new_incarnation_with_the_counter_last_seen_counts_as_a_move_and_is_fenced_as_itself() -> None:
    t = LivenessTracker(10.0)
    t.observe((WorkerItem("w", heartbeat=5, incarnation="old"),), (), 0.0)
    # Forgotten and registered again between two scans; its new counter has reached 5 again.
    t.observe((WorkerItem("w", heartbeat=5, incarnation="new"),), (), 9.0)
    assert t.is_alive("w", 15.0)  # watched from 9.0, not from 0.0
    assert t.dead_owner("w", 15.0) is None
    assert t.dead_owner("w", 19.0) == OwnerObservation("w", 5, "new")  # the fence names the new incarnation
