"""The coordinator stepped one event at a time on made-up time: no threads, no sleeps, no I/O.

Each test is a row of the transition table (docs/protocol.md) or of the fault table.
"""

from __future__ import annotations

from consumer.config import LeaseConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.leases.model import Lease, LeaseState, WorkerItem
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    Deregister,
    Discover,
    Forget,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    LeaseWrite,
    Metric,
    Outcome,
    ReadInbox,
    ReadTable,
    Reconcile,
    Reconciled,
    Renew,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    TableRead,
    WriteKind,
)
from consumer.lifecycle.ownership import Phase
from consumer.lifecycle.processor import ShutdownReason
from consumer.records import Position

T0 = 1000.0
WALL = 1_700_000_000_000
LEASES = LeaseConfig(lease_duration=10.0, safety_margin=2.0, scan_interval=1.0, inbox_poll_interval=0.2)


def coordinator(me: str = "a", lease: LeaseConfig = LEASES) -> Coordinator:
    config = WorkerConfig(
        application="app",
        lease_table="l",
        checkpoint_table="c",
        streams=(StreamSpec("s", lambda: None),),  # type: ignore[arg-type,return-value]
        worker_id=me,
        lease=lease,
        shutdown=ShutdownConfig(deadline=20.0, final_checkpoint_timeout=5.0),
    )
    return Coordinator(config, T0)


def worker(wid: str, hb: int = 1, *, wall: int = WALL, draining: bool = False) -> WorkerItem:
    return WorkerItem(wid, heartbeat=hb, heartbeat_ms=wall, started_ms=wall - 1000, draining=draining)


def of(actions: list[Action], kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def writes(actions: list[Action], kind: WriteKind) -> list[LeaseWrite]:
    return [a for a in actions if isinstance(a, LeaseWrite) and a.kind is kind]


def alive(c: Coordinator, now: float = T0) -> None:
    """Start-up: heartbeat written, so the worker may act on leases until now + 8 s."""
    first = c.step(now, WALL, [])
    assert of(first, Heartbeat) and of(first, ReadInbox) and of(first, ReadTable)
    assert of(c.step(now, WALL, [HeartbeatResult(now, Result.OK)]), Renew) == [Renew(now)]


def owning(c: Coordinator, lease: Lease, now: float = T0) -> Lease:
    """Take ``lease`` (unowned) through a scan and a successful take; return the owned lease."""
    acts = c.step(now, WALL, [TableRead(TableSnapshot((lease,), (worker(c.id),)))])
    [take] = writes(acts, WriteKind.TAKE)
    mine = Lease(lease.stream, lease.shard_id, owner=c.id, epoch=lease.epoch + 1)
    acts = c.step(now, WALL, [ActionResult(WriteKind.TAKE, take.lease, Result.OK, new=mine)])
    assert Start(mine) in acts
    return mine


# -- start-up and planning ----------------------------------------------------------------------------
def test_first_step_heartbeats_polls_and_scans_and_discovery_waits_its_interval() -> None:
    c = coordinator()
    acts = c.step(T0, WALL, [])
    assert of(acts, Heartbeat) == [Heartbeat(0, 0, False)]
    assert not of(acts, Discover)
    assert of(c.step(T0 + LEASES.discovery_interval, WALL, []), Discover)


def test_no_lease_is_taken_before_the_first_heartbeat_is_written() -> None:
    c = coordinator()
    c.step(T0, WALL, [])
    acts = c.step(T0, WALL, [TableRead(TableSnapshot((Lease("s", "sh0"),), (worker("a"),)))])
    assert not writes(acts, WriteKind.TAKE)


def test_unowned_lease_is_taken_and_started_once_the_take_is_written() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    assert c.owned[mine.key].phase is Phase.RUNNING


def test_a_lease_given_to_us_by_transfer_is_started_from_the_scan() -> None:
    c = coordinator()
    alive(c)
    given = Lease("s", "sh0", owner="a", epoch=4)
    acts = c.step(T0, WALL, [TableRead(TableSnapshot((given,), (worker("a"), worker("b"))))])
    assert Start(given) in acts


def test_leftovers_of_crashed_workers_do_not_shrink_a_new_workers_share() -> None:
    """Three SIGKILLed workers' items (silent by their wall time) and two free leases: take both now."""
    c = coordinator("z")
    alive(c)
    stale = WALL - 60_000
    workers = (worker("a", wall=stale), worker("b", wall=stale), worker("c", wall=stale), worker("z"))
    leases = (Lease("s", "sh0"), Lease("s", "sh1"))
    acts = c.step(T0, WALL, [TableRead(TableSnapshot(leases, workers))])
    assert {w.lease.key for w in writes(acts, WriteKind.TAKE)} == {x.key for x in leases}


def test_a_dead_owners_lease_is_stolen_only_after_a_full_lease_duration_of_silence() -> None:
    c = coordinator("b")
    alive(c)
    orphan = Lease("s", "sh0", owner="a", epoch=3)
    snap = TableSnapshot((orphan,), (worker("a", hb=7), worker("b")))
    assert not writes(c.step(T0, WALL, [TableRead(snap)]), WriteKind.TAKE)
    c.step(T0 + 4, WALL, [HeartbeatResult(T0 + 4, Result.OK)])
    assert not writes(c.step(T0 + 9.9, WALL, [TableRead(snap)]), WriteKind.TAKE)
    c.step(T0 + 9.9, WALL, [HeartbeatResult(T0 + 9.9, Result.OK)])
    [steal] = writes(c.step(T0 + 10.0, WALL, [TableRead(snap)]), WriteKind.TAKE)
    assert steal.dead_owner is not None and steal.dead_owner.heartbeat == 7


def test_silent_worker_items_are_forgotten_once_after_three_lease_durations() -> None:
    c = coordinator("b")
    alive(c)
    dead = worker("a", hb=7)
    snap = TableSnapshot((), (dead, worker("b")))
    c.step(T0, WALL, [TableRead(snap)])
    for t in (10.0, 20.0, 29.9):
        c.step(T0 + t, WALL, [HeartbeatResult(T0 + t, Result.OK)])
        assert not of(c.step(T0 + t, WALL, [TableRead(snap)]), Forget)
    c.step(T0 + 30, WALL, [HeartbeatResult(T0 + 30, Result.OK)])
    assert of(c.step(T0 + 30, WALL, [TableRead(snap)]), Forget) == [Forget(dead)]
    assert not of(c.step(T0 + 31, WALL, [TableRead(snap)]), Forget)


# -- the transition table -----------------------------------------------------------------------------
def handing_off(c: Coordinator, mine: Lease, to: str = "b", now: float = T0) -> list[Action]:
    asked = Lease(
        mine.stream, mine.shard_id, owner=c.id, epoch=mine.epoch, handoff_to=to, handoff_requested_ms=WALL
    )
    other = Lease("s", "sh1", owner=c.id, epoch=1)  # we hold two, so one is above our share of 1
    c.owned[other.key] = c.owned[mine.key].__class__(other)
    return c.step(now, WALL, [TableRead(TableSnapshot((asked, other), (worker(c.id), worker(to))))])


def test_running_to_stopping_on_a_hand_off_request_then_transferring_once_drained() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    assert Stop(mine.key, ShutdownReason.REQUESTED) in handing_off(c, mine)
    assert c.owned[mine.key].phase is Phase.STOPPING
    acts = c.step(T0 + 0.3, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)])
    [transfer] = writes(acts, WriteKind.TRANSFER)
    assert transfer.to == "b"
    moved = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    acts = c.step(
        T0 + 0.4, WALL, [ActionResult(WriteKind.TRANSFER, transfer.lease, Result.OK, new=moved, to="b")]
    )
    assert mine.key not in c.owned
    latency = [m for m in of(acts, Metric) if m.name == "HandoffLatencyMs"]
    assert latency and abs(latency[0].value - 400) < 1


def test_a_transfer_that_fails_transiently_is_retried_after_a_backoff_not_before() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    handing_off(c, mine)
    [transfer] = writes(
        c.step(T0, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.TRANSFER
    )
    assert not writes(c.step(T0, WALL, []), WriteKind.TRANSFER)  # in flight: not sent twice
    c.step(T0, WALL, [ActionResult(WriteKind.TRANSFER, transfer.lease, Result.FAILED, to="b", error="reset")])
    assert c.owned[mine.key].phase is Phase.TRANSFERRING
    assert not writes(c.step(T0 + 0.01, WALL, []), WriteKind.TRANSFER)
    assert writes(c.step(T0 + 2.0, WALL, []), WriteKind.TRANSFER)


def test_a_transfer_whose_successor_left_releases_and_a_release_that_conflicts_ends_the_ownership() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    handing_off(c, mine)
    [t] = writes(c.step(T0, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.TRANSFER)
    acts = c.step(T0, WALL, [ActionResult(WriteKind.TRANSFER, t.lease, Result.CONFLICT, to="b")])
    [release] = writes(acts, WriteKind.RELEASE)
    c.step(T0, WALL, [ActionResult(WriteKind.RELEASE, release.lease, Result.CONFLICT)])
    assert mine.key not in c.owned


def test_halted_shard_keeps_its_lease_is_marked_for_operators_and_is_not_retaken() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    at = Position("49000", 0)
    acts = c.step(T0 + 1, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.HALTED, halted_at=at)])
    assert writes(acts, WriteKind.HALT) == [LeaseWrite(WriteKind.HALT, mine, halted_at=at)]
    assert [m.name for m in of(acts, Metric)] == ["ShardsHalted"]
    assert c.owned[mine.key].phase is Phase.HALTED
    assert not writes(c.step(T0 + 5, WALL, []), WriteKind.RELEASE)


def test_gave_up_shard_is_released_and_this_worker_waits_before_taking_it_again() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    acts = c.step(T0 + 1, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.GAVE_UP, detail="refused")])
    [release] = writes(acts, WriteKind.RELEASE)
    assert [m.name for m in of(acts, Metric)] == ["ShardsGivenUp"]
    c.step(T0 + 1, WALL, [ActionResult(WriteKind.RELEASE, release.lease, Result.OK)])
    assert not c.owned
    free = Lease("s", "sh0", epoch=mine.epoch + 1)
    c.step(T0 + 4, WALL, [HeartbeatResult(T0 + 4, Result.OK)])
    assert not writes(
        c.step(T0 + 5, WALL, [TableRead(TableSnapshot((free,), (worker("a"),)))]), WriteKind.TAKE
    )
    c.step(T0 + 8, WALL, [HeartbeatResult(T0 + 8, Result.OK)])
    assert writes(
        c.step(T0 + 11.5, WALL, [TableRead(TableSnapshot((free,), (worker("a"),)))]), WriteKind.TAKE
    )


def test_shard_end_marks_the_lease_ended() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    [end] = writes(c.step(T0, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.SHARD_END)]), WriteKind.END)
    c.step(T0, WALL, [ActionResult(WriteKind.END, end.lease, Result.OK, new=mine)])
    assert not c.owned


def test_a_lease_that_moved_in_the_table_stops_its_consumer_as_lost() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    moved = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    acts = c.step(T0 + 1, WALL, [TableRead(TableSnapshot((moved,), (worker("a"), worker("b"))))])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts
    assert not c.owned


def test_a_finished_report_from_an_earlier_ownership_is_ignored() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    assert c.step(T0, WALL, [ShardFinished(mine.key, mine.epoch - 1, Outcome.GAVE_UP)]) == []
    assert c.owned[mine.key].phase is Phase.RUNNING


# -- membership faults --------------------------------------------------------------------------------
def test_a_failed_heartbeat_is_retried_soon_and_planning_stops_when_the_window_closes() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 4, WALL, [HeartbeatResult(T0 + 4, Result.FAILED, error="refused")])
    assert of(c.step(T0 + 4.5, WALL, []), Heartbeat)
    free = TableSnapshot((Lease("s", "sh0"),), (worker("a"),))
    assert not writes(c.step(T0 + 8.0, WALL, [TableRead(free)]), WriteKind.TAKE)  # window closed at T0 + 8
    c.step(T0 + 9, WALL, [HeartbeatResult(T0 + 9, Result.OK)])
    assert writes(c.step(T0 + 9, WALL, [TableRead(free)]), WriteKind.TAKE)


def test_a_fenced_heartbeat_reconciles_and_drops_what_was_taken_meanwhile() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    acts = c.step(T0 + 12, WALL, [HeartbeatResult(T0 + 12, Result.CONFLICT, fenced=True)])
    assert not of(acts, Heartbeat)
    assert of(acts, Reconcile)  # at once, and again every 0.5 s until it succeeds
    assert not of(c.step(T0 + 12.1, WALL, []), Reconcile)
    assert of(c.step(T0 + 12.5, WALL, []), Reconcile)
    taken = Lease("s", "sh0", owner="b", epoch=mine.epoch + 1)
    me = WorkerItem("a", heartbeat=3, generation=1)
    acts = c.step(T0 + 12, WALL, [Reconciled(me, TableSnapshot((taken,), (me, worker("b"))))])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts
    assert of(acts, Heartbeat) == [Heartbeat(1, 0, False)]  # with the new generation, at once


def test_an_operator_drain_in_the_inbox_starts_the_shutdown() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    acts = c.step(T0 + 1, WALL, [InboxRead(WorkerItem("a", drain_requested=True))])
    assert Stop(mine.key, ShutdownReason.REQUESTED) in acts
    assert c.shutting_down


# -- shutdown -----------------------------------------------------------------------------------------
def test_shutdown_hands_each_lease_to_the_least_loaded_live_worker_then_deregisters() -> None:
    c = coordinator()
    alive(c)
    first = owning(c, Lease("s", "sh0"))
    second = owning(c, Lease("s", "sh1"))
    busy = Lease("s", "sh2", owner="b", epoch=1)
    c.step(
        T0 + 1,
        WALL,
        [TableRead(TableSnapshot((first, second, busy), (worker("a"), worker("b"), worker("c"))))],
    )
    acts = c.step(T0 + 2, WALL, [ShutdownRequested()])
    assert {a.key for a in of(acts, Stop)} == {first.key, second.key}
    assert of(acts, Heartbeat) == [Heartbeat(0, 2, True)]
    acts = c.step(T0 + 2.2, WALL, [ShardFinished(k.key, k.epoch, Outcome.STOPPED) for k in (first, second)])
    assert sorted((w.lease.shard_id, w.to) for w in writes(acts, WriteKind.TRANSFER)) == [
        ("sh0", "c"),
        ("sh1", "b"),
    ]
    results = [
        ActionResult(WriteKind.TRANSFER, w.lease, Result.OK, to=w.to)
        for w in writes(acts, WriteKind.TRANSFER)
    ]
    acts = c.step(T0 + 2.3, WALL, results)
    assert of(acts, Deregister) and c.done


def test_shutdown_with_nobody_to_take_over_releases() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    c.step(T0 + 1, WALL, [ShutdownRequested()])
    assert writes(
        c.step(T0 + 1.1, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.RELEASE
    )


def test_a_shard_that_misses_the_shutdown_deadline_is_left_to_expire_never_to_two_owners() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    c.step(T0 + 1, WALL, [ShutdownRequested()])
    acts = c.step(T0 + 21, WALL, [])
    assert Stop(mine.key, ShutdownReason.LEASE_LOST) in acts and of(acts, Deregister)
    assert not writes(acts, WriteKind.RELEASE) and not writes(acts, WriteKind.TRANSFER)


def test_a_halted_shard_is_handed_on_at_shutdown_without_draining() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    c.step(T0 + 1, WALL, [TableRead(TableSnapshot((mine,), (worker("a"), worker("b"))))])
    c.step(T0 + 1, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.HALTED, halted_at=Position("5"))])
    acts = c.step(T0 + 2, WALL, [ShutdownRequested()])
    assert not of(acts, Stop)
    assert [w.to for w in writes(acts, WriteKind.TRANSFER)] == ["b"]


def test_next_due_follows_the_earliest_schedule() -> None:
    c = coordinator()
    alive(c)
    assert c.next_due() <= T0 + LEASES.inbox_poll_interval
    assert Lease("s", "x", state=LeaseState.ENDED).ended


def test_gave_up_shard_goes_straight_to_another_live_worker() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh0"))
    c.step(T0 + 0.5, WALL, [TableRead(TableSnapshot((mine,), (worker("a"), worker("b"))))])
    acts = c.step(T0 + 1, WALL, [ShardFinished(mine.key, mine.epoch, Outcome.GAVE_UP, detail="refused")])
    assert [(w.lease.key, w.to) for w in writes(acts, WriteKind.TRANSFER)] == [(mine.key, "b")]


def test_a_worker_whose_item_was_forgotten_reconciles_at_its_next_inbox_read() -> None:
    c = coordinator()
    alive(c)
    assert of(c.step(T0 + 1, WALL, [InboxRead(None)]), Reconcile)
    other = coordinator()
    alive(other)
    assert not of(other.step(T0 + 1, WALL, [InboxRead(None, error="refused")]), Reconcile)  # a failed read


def test_a_lease_received_while_shutting_down_is_handed_straight_on_never_started() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh1"))  # still draining when the other lease arrives
    c.step(
        T0 + 0.5,
        WALL,
        [TableRead(TableSnapshot((mine,), (worker("a"), worker("b"), worker("c", draining=True))))],
    )
    c.step(T0 + 1, WALL, [ShutdownRequested()])
    assert not of(c.step(T0 + 1.5, WALL, []), ReadTable)  # no planning rounds while shutting down
    acts = c.step(T0 + 2, WALL, [InboxRead(WorkerItem("a", inbox=1))])  # somebody gave us something
    [read] = of(acts, ReadTable)
    given = Lease("s", "sh0", owner="a", epoch=3)
    acts = c.step(T0 + 2.1, WALL, [TableRead(TableSnapshot((given,), (worker("a"), worker("b"))))])
    assert not of(acts, Start)
    assert [(w.lease, w.to) for w in writes(acts, WriteKind.TRANSFER)] == [(given, "b")]
    assert read == ReadTable()


def test_a_take_that_lands_after_the_shutdown_began_is_handed_on_not_dropped() -> None:
    c = coordinator()
    alive(c)
    mine = owning(c, Lease("s", "sh1"))
    acts = c.step(T0 + 1, WALL, [TableRead(TableSnapshot((mine, Lease("s", "sh0")), (worker("a"),)))])
    [take] = writes(acts, WriteKind.TAKE)
    c.step(T0 + 1.1, WALL, [ShutdownRequested()])
    taken = Lease("s", "sh0", owner="a", epoch=1)
    acts = c.step(T0 + 1.2, WALL, [ActionResult(WriteKind.TAKE, take.lease, Result.OK, new=taken)])
    assert not of(acts, Start)
    assert [w.lease for w in writes(acts, WriteKind.RELEASE)] == [taken]  # nobody else alive: released
