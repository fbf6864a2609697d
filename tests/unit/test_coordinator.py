"""A member's side of the coordinator, stepped one event at a time on made-up time.

Each test is a row of the transition table (docs/protocol.md) or of the fault table. The leader's side is in
test_leader.py.
"""

from __future__ import annotations

from consumer.leases.model import Leader, Lease, LeaseState
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.messages import (
    AckGiven,
    Action,
    ActionResult,
    ClaimLeadership,
    Deregister,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    LeaderRead,
    LeaseWrite,
    Metric,
    Outcome,
    OwnRead,
    ReadInbox,
    ReadLeader,
    ReadOwn,
    ReadTable,
    Reconcile,
    Reconciled,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    Wake,
    WatchLeader,
    WriteKind,
)
from consumer.lifecycle.ownership import Phase
from consumer.lifecycle.processor import ShutdownReason
from consumer.records import Position
from tests.unit.coordinator_support import (
    LEASES,
    T0,
    WALL,
    alive,
    coordinator,
    drained,
    follow,
    given,
    of,
    owning,
    worker,
    writes,
)


# -- start-up and polling -------------------------------------------------------------------------------
def test_a_member_heartbeats_polls_its_own_item_and_never_reads_the_table() -> None:
    c = coordinator()
    acts = c.step(T0, [])
    assert of(acts, Heartbeat) == [Heartbeat(0, 0, False)] and of(acts, ReadInbox)
    assert not of(acts, ReadTable)
    follow(c)
    for t in range(2, 30):
        assert not of(c.step(T0 + t, []), ReadTable)


def test_the_own_item_is_polled_once_a_second_when_quiet_and_fast_for_half_a_lease_after_a_wake() -> None:
    c = coordinator()
    alive(c)
    follow(c)
    quiet = [t for t in range(1, 100) if of(c.step(T0 + t / 10, []), ReadInbox)]
    assert 8 <= len(quiet) <= 11  # once a second (not fast at start: a whole fleet starts at once)
    c.step(T0 + 20, [InboxRead(worker("a", inbox=1))])  # a plain wake-up: read, stay slow
    assert len([t for t in range(1, 10) if of(c.step(T0 + 20 + t / 10, []), ReadInbox)]) <= 1
    c.step(T0 + 20, [InboxRead(worker("a", inbox=2, expect=1))])  # a lease is on its way to us
    fast = [t for t in range(1, 50) if of(c.step(T0 + 20 + t / 10, []), ReadInbox)]
    assert len(fast) >= 40  # every 0.1 s for half a lease
    later = [t for t in range(1, 50) if of(c.step(T0 + 26 + t / 10, []), ReadInbox)]
    assert len(later) <= 6  # then once a second again


def test_a_new_worker_does_not_wake_the_leader_which_sees_it_at_its_next_scan() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [])
    assert not of(c.step(T0 + 1, [LeaderRead(Leader("z", 3))]), Wake)


# -- leases given to us ---------------------------------------------------------------------------------
def test_a_given_lease_is_read_started_and_acknowledged() -> None:
    c = coordinator()
    alive(c)
    mine = Lease("s", "sh0", owner="a", epoch=4)
    acts = given(c, mine)
    assert Start(mine) in acts
    assert AckGiven(frozenset({mine.key})) in acts
    assert c.owned[mine.key].phase is Phase.RUNNING


def test_a_given_lease_that_already_moved_on_is_acknowledged_not_started() -> None:
    c = coordinator()
    alive(c)
    acts = given(c, Lease("s", "sh0", owner="b", epoch=5))
    assert not of(acts, Start) and of(acts, AckGiven)


def test_a_missed_inbox_read_is_made_good_by_the_given_set_at_the_next_read() -> None:
    c = coordinator()
    alive(c)
    mine = Lease("s", "sh0", owner="a", epoch=2)
    assert not of(c.step(T0, [InboxRead(None, error="connection refused")]), ReadOwn)
    acts = c.step(T0 + 0.2, [InboxRead(worker("a", inbox=1, given=frozenset({mine.key})))])
    [read] = of(acts, ReadOwn)
    assert Start(mine) in c.step(T0 + 0.3, [OwnRead(read.keys, (mine,))])


def test_a_failed_own_read_is_retried_soon() -> None:
    c = coordinator()
    alive(c)
    [read] = of(c.step(T0, [InboxRead(worker("a", inbox=1, given=frozenset({"k"})))]), ReadOwn)
    assert not of(c.step(T0 + 0.1, [OwnRead(read.keys, None, error="reset")]), ReadOwn)
    assert of(c.step(T0 + 0.6, []), ReadOwn)


def test_a_lease_that_moved_in_the_table_stops_its_consumer_as_lost() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    [read] = of(c.step(T0 + 1, [InboxRead(worker("a", inbox=5))]), ReadOwn)
    moved = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    acts = c.step(T0 + 1, [OwnRead(read.keys, (moved,))])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts
    assert not c.owned


# -- hand-off on request ----------------------------------------------------------------------------------
def asked(c: Coordinator, mine: Lease, to: str = "b", now: float = T0 + 1) -> list[Action]:
    [read] = of(c.step(now, [InboxRead(worker("a", inbox=9))]), ReadOwn)
    req = Lease("s", mine.shard_id, owner="a", epoch=mine.epoch, handoff_to=to, handoff_requested_ms=WALL)
    return c.step(now, [OwnRead(read.keys, (req,))])


def test_running_to_stopping_one_idle_poll_after_the_request_then_transferring_once_drained() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    assert not of(asked(c, mine), Stop)  # the requester gets one idle poll to start listening fast
    assert not of(c.step(T0 + 1.5, []), Stop)
    assert Stop(mine.key, ShutdownReason.REQUESTED) in c.step(T0 + 2.0, [])
    assert c.owned[mine.key].phase is Phase.STOPPING
    acts = c.step(T0 + 2.3, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)])
    [transfer] = writes(acts, WriteKind.TRANSFER)
    assert transfer.to == "b"
    moved = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    acts = c.step(T0 + 2.4, [ActionResult(WriteKind.TRANSFER, transfer.lease, Result.OK, new=moved, to="b")])
    assert mine.key not in c.owned
    latency = [m for m in of(acts, Metric) if m.name == "HandoffLatencyMs"]
    assert latency and abs(latency[0].value - 400) < 1


def test_a_drained_shards_transfer_runs_before_the_membership_work_due_in_the_same_step() -> None:
    """The shell runs actions in order, one at a time: the successor must not wait behind our polls."""
    c = coordinator()
    alive(c)
    mine = owning(c)
    asked(c, mine)
    c.step(T0 + 2.0, [])
    acts = c.step(T0 + 6.0, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)])
    kinds = [type(a) for a in acts]
    assert ReadInbox in kinds and Heartbeat in kinds  # both due by now
    [transfer] = writes(acts, WriteKind.TRANSFER)
    assert acts.index(transfer) < min(kinds.index(ReadInbox), kinds.index(Heartbeat))


def stopped_for_handoff(c: Coordinator, mine: Lease) -> LeaseWrite:
    asked(c, mine)
    c.step(T0 + 2.0, [])
    [transfer] = writes(
        c.step(T0 + 2.0, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.TRANSFER
    )
    return transfer


def test_a_transfer_that_fails_transiently_is_retried_after_a_backoff_not_before() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    transfer = stopped_for_handoff(c, mine)
    assert not writes(c.step(T0 + 2.0, []), WriteKind.TRANSFER)  # in flight: not sent twice
    c.step(
        T0 + 2.0,
        [ActionResult(WriteKind.TRANSFER, transfer.lease, Result.FAILED, to="b", error="reset")],
    )
    assert c.owned[mine.key].phase is Phase.TRANSFERRING
    assert not writes(c.step(T0 + 2.01, []), WriteKind.TRANSFER)
    assert writes(c.step(T0 + 4.0, []), WriteKind.TRANSFER)


def test_a_transfer_whose_successor_left_releases_and_a_release_that_conflicts_ends_the_ownership() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    transfer = stopped_for_handoff(c, mine)
    acts = c.step(T0 + 2.1, [ActionResult(WriteKind.TRANSFER, transfer.lease, Result.CONFLICT, to="b")])
    [release] = writes(acts, WriteKind.RELEASE)
    c.step(T0 + 2.2, [ActionResult(WriteKind.RELEASE, release.lease, Result.CONFLICT)])
    assert mine.key not in c.owned


# -- what a shard consumer reports ------------------------------------------------------------------------
def test_halted_shard_keeps_its_lease_and_is_marked_for_operators() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    at = Position("5", 0)
    acts = c.step(T0, [ShardFinished(mine.key, mine.epoch, Outcome.HALTED, halted_at=at)])
    assert writes(acts, WriteKind.HALT) == [LeaseWrite(WriteKind.HALT, mine, halted_at=at)]
    assert not of(acts, Metric)  # counted by the worker's HaltedShards gauge while it stays halted
    assert c.owned[mine.key].phase is Phase.HALTED
    assert not writes(c.step(T0 + 5, []), WriteKind.RELEASE)


def test_a_halted_shard_asked_for_is_handed_on_without_draining() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    c.step(T0, [ShardFinished(mine.key, mine.epoch, Outcome.HALTED, halted_at=Position("5", 0))])
    asked(c, mine)
    held = c.owned[mine.key]
    assert held.phase is Phase.HALTED_ASKED and held.halted  # still in the HaltedShards gauge until it moves
    acts = c.step(T0 + 2.0, [])
    assert not of(acts, Stop)
    assert [w.to for w in writes(acts, WriteKind.TRANSFER)] == ["b"]


def test_a_shard_given_up_on_is_released_marked_so_that_the_leader_offers_it_to_another_worker() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    acts = c.step(T0, [ShardFinished(mine.key, mine.epoch, Outcome.GAVE_UP, detail="refused")])
    assert [m.name for m in of(acts, Metric)] == ["ShardsGivenUp"]
    [release] = writes(acts, WriteKind.RELEASE)
    assert release.given_up
    c.step(T0, [ActionResult(WriteKind.RELEASE, release.lease, Result.OK)])
    assert not c.owned


def test_shard_end_marks_the_lease_ended() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    [end] = writes(c.step(T0, [ShardFinished(mine.key, mine.epoch, Outcome.SHARD_END)]), WriteKind.END)
    c.step(T0, [ActionResult(WriteKind.END, end.lease, Result.OK)])
    assert not c.owned
    assert Lease("s", "x", state=LeaseState.ENDED).ended


def test_a_finished_report_from_an_earlier_ownership_is_ignored() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, epoch=3)
    assert c.step(T0, [ShardFinished(mine.key, mine.epoch - 1, Outcome.GAVE_UP)]) == []
    assert c.owned[mine.key].phase is Phase.RUNNING


# -- membership faults ------------------------------------------------------------------------------------
def test_a_failed_heartbeat_is_retried_soon() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 4.0, [])
    c.step(T0 + 4.0, [HeartbeatResult(T0 + 4.0, Result.FAILED, error="timeout")])
    assert of(c.step(T0 + 4.5, []), Heartbeat)
    assert not c.membership.valid(T0 + 8.0)  # the window of the last good heartbeat closed


def test_a_fenced_heartbeat_reconciles_and_drops_what_was_taken_meanwhile() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    acts = c.step(T0 + 12, [HeartbeatResult(T0 + 12, Result.CONFLICT, fenced=True)])
    assert not of(acts, Heartbeat)
    [rec] = of(acts, Reconcile)  # at once, and again every 0.5 s until it succeeds
    assert mine.key in rec.keys
    assert not of(c.step(T0 + 12.1, []), Reconcile)
    assert of(c.step(T0 + 12.5, []), Reconcile)
    taken = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    acts = c.step(T0 + 12.6, [Reconciled(worker("a", generation=1), (taken,), rec.keys)])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts
    assert of(acts, Heartbeat) == [Heartbeat(1, 0, False)]  # with the new generation, at once


def test_a_worker_whose_item_was_forgotten_reconciles_at_its_next_inbox_read() -> None:
    c = coordinator()
    alive(c)
    assert of(c.step(T0 + 1, [InboxRead(None)]), Reconcile)
    other = coordinator("b")
    alive(other)
    assert not of(other.step(T0 + 1, [InboxRead(None, error="refused")]), Reconcile)  # a failed read


def test_a_stale_inbox_read_neither_fences_nor_wakes() -> None:
    c = coordinator()
    alive(c)
    c.step(T0, [InboxRead(worker("a", inbox=3, generation=0))])
    acts = c.step(T0 + 0.2, [InboxRead(worker("a", inbox=2, generation=0))])  # an older copy
    assert not of(acts, ReadOwn) and not of(acts, Reconcile)


# -- shutdown ---------------------------------------------------------------------------------------------
def test_an_operator_drain_in_the_inbox_starts_the_shutdown() -> None:
    c = coordinator()
    alive(c)
    follow(c)
    c.step(T0 + 1, [InboxRead(worker("a", inbox=7, drain_requested=True))])
    assert c.shutting_down


def test_shutdown_heartbeats_draining_wakes_the_leader_and_hands_on_what_the_leader_asks_for() -> None:
    c = coordinator()
    alive(c)
    follow(c, "z")
    mine = owning(c, now=T0 + 1)
    acts = c.step(T0 + 2, [ShutdownRequested()])
    assert of(acts, Wake) == [Wake("z")]
    assert of(acts, Heartbeat) == [Heartbeat(0, 1, True)]
    assert acts.index(of(acts, Heartbeat)[0]) < acts.index(Wake("z"))  # the leader sees us draining
    assert not of(acts, Stop)  # waits for the leader to say to whom
    assert not of(c.step(T0 + 3, []), ReadLeader)  # never claims leadership again
    asked(c, mine, "b", now=T0 + 3)
    assert Stop(mine.key, ShutdownReason.REQUESTED) in c.step(T0 + 4, [])
    [t] = writes(c.step(T0 + 4.1, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.TRANSFER)
    acts = c.step(T0 + 4.2, [ActionResult(WriteKind.TRANSFER, t.lease, Result.OK, to="b")])
    assert not of(acts, Deregister)  # not before a read shows nothing was handed to us meanwhile
    acts = drained(c, T0 + 4.3)
    assert of(acts, Deregister) and c.done


def test_a_leader_read_answered_after_the_shutdown_began_neither_watches_nor_claims() -> None:
    c = coordinator()
    alive(c)
    owning(c)
    assert of(c.step(T0 + 1, []), ReadLeader)  # in flight when the shutdown is asked
    c.step(T0 + 1, [ShutdownRequested()])
    acts = c.step(T0 + 1.1, [LeaderRead(None)])
    assert not c.done and not of(acts, ClaimLeadership) and not of(acts, WatchLeader)


def test_shutdown_releases_what_nobody_asks_for_within_half_a_lease() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    c.step(T0 + 1, [ShutdownRequested()])
    assert not of(c.step(T0 + 5.9, []), Stop)
    # released to nobody: a poll under way is not waited for (no successor reads after it)
    assert Stop(mine.key, ShutdownReason.REQUESTED, last_poll=False) in c.step(T0 + 6.0, [])
    [release] = writes(
        c.step(T0 + 6.1, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.RELEASE
    )
    assert release.lease == mine


def test_a_shard_that_misses_the_shutdown_deadline_is_left_to_expire_never_to_two_owners() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c)
    c.step(T0, [ShutdownRequested()])
    acts = c.step(T0 + 20, [])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts and of(acts, Deregister)
    assert not writes(acts, WriteKind.RELEASE) and not writes(acts, WriteKind.TRANSFER)


def test_a_lease_given_while_shutting_down_is_passed_on_never_started() -> None:
    c = coordinator()
    alive(c)
    owning(c, "sh1")
    c.step(T0 + 1, [ShutdownRequested()])
    late = Lease("s", "sh0", owner="a", epoch=2)
    acts = given(c, late, now=T0 + 1.5, inbox=5)
    assert not of(acts, Start)
    assert [w.lease for w in writes(acts, WriteKind.RELEASE)] == [late]


def test_next_due_follows_the_earliest_schedule() -> None:
    c = coordinator()
    c.step(T0, [])
    assert c.next_due() <= T0 + LEASES.idle_poll_interval  # the next poll of our own item
    c.step(T0, [InboxRead(worker("a", inbox=1, expect=1))])
    assert c.next_due() <= T0 + LEASES.inbox_poll_interval


def test_a_lease_that_arrives_already_asked_for_is_handed_on_after_one_idle_poll() -> None:
    c = coordinator()
    alive(c)
    arriving = Lease("s", "sh0", owner="a", epoch=2, handoff_to="n", handoff_requested_ms=WALL)
    acts = given(c, arriving, now=T0 + 1)
    assert Start(arriving) in acts
    assert Stop(arriving.key, ShutdownReason.REQUESTED) in c.step(T0 + 2.0, [])
