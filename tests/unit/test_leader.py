"""Leadership and the leader's duties, stepped on made-up time (the coordinator, no I/O)."""

from __future__ import annotations

from dataclasses import replace

from consumer.leases.model import Leader, Lease
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.lifecycle.messages import (
    ActionResult,
    ClaimLeadership,
    Deregister,
    Discover,
    Forget,
    HeartbeatResult,
    LeaderRead,
    LeadershipResult,
    LeaderWatched,
    Metric,
    Outcome,
    ReadInbox,
    ReadLeader,
    ReadTable,
    ResignLeadership,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    TableRead,
    WatchLeader,
    WriteKind,
)
from consumer.lifecycle.processor import ShutdownReason
from tests.unit.coordinator_support import (
    LEASES,
    T0,
    alive,
    coordinator,
    drained,
    follow,
    lead,
    of,
    owning,
    worker,
    writes,
)


def table(leases: tuple[Lease, ...], *workers: str, hb: int = 1, **kw: object) -> TableRead:
    return TableRead(TableSnapshot(leases, tuple(worker(w, hb, **kw) for w in workers)))  # type: ignore[arg-type]


# -- leadership ---------------------------------------------------------------------------------------
def test_nobody_leads_so_the_first_check_claims_the_absent_item() -> None:
    c = coordinator()
    alive(c)
    lead(c)


def test_an_unowned_item_is_claimed_with_its_epoch() -> None:
    c = coordinator()
    alive(c)
    assert of(c.step(T0 + 1, []), ReadLeader)
    free = Leader(None, 4)
    assert of(c.step(T0 + 1, [LeaderRead(free)]), ClaimLeadership) == [ClaimLeadership(free, None)]


def watch(c, now: float, hb: int | None) -> list:  # type: ignore[no-untyped-def]
    """One leader check at ``now`` that sees the leader's heartbeat ``hb`` (None: its item is gone)."""
    acts = c.step(now, [])
    [w] = of(acts, WatchLeader) or [WatchLeader("z")]
    return c.step(now, [LeaderWatched(w.worker_id, worker("z", hb) if hb is not None else None)])


def test_a_follower_claims_only_after_the_leaders_heartbeat_stood_still_a_whole_lease() -> None:
    c = coordinator()
    alive(c)
    follow(c, "z")
    assert not of(watch(c, T0 + 2, 5), ClaimLeadership)
    assert not of(watch(c, T0 + 3, 6), ClaimLeadership)  # moved: counting starts again at T0 + 3
    assert not of(watch(c, T0 + 8, 5), ClaimLeadership)  # a stale (lower) read is not a move
    assert not of(watch(c, T0 + 12.9, 6), ClaimLeadership)
    [claim] = of(watch(c, T0 + 13, 6), ClaimLeadership)
    assert claim == ClaimLeadership(Leader("z", 1), OwnerObservation("z", 6))


def test_a_follower_checks_again_the_moment_the_leaders_lease_runs_out_not_at_the_next_periodic_check() -> (
    None
):
    c = coordinator()
    alive(c)
    follow(c, "z")  # a check every second
    c.step(T0 + 2, [])
    c.step(T0 + 2.3, [LeaderWatched("z", worker("z", 5))])  # answered late: the move is timed from T0 + 2.3
    for k in range(3, 13):  # still; the answers come at once, so after T0 + 12 the lease has 0.3 s to run
        assert not of(watch(c, T0 + k, 5), ClaimLeadership)
    assert c.leadership.next_due() == T0 + 2.3 + 10  # its lease duration; not T0 + 13, the periodic check
    [claim] = of(watch(c, T0 + 12.3, 5), ClaimLeadership)
    assert claim == ClaimLeadership(Leader("z", 1), OwnerObservation("z", 5))


def test_a_leader_whose_item_is_gone_for_a_whole_lease_is_replaced() -> None:
    c = coordinator()
    alive(c)
    follow(c, "z", now=T0 + 1)
    assert not of(watch(c, T0 + 2, None), ClaimLeadership)
    [claim] = of(watch(c, T0 + 11, None), ClaimLeadership)
    assert claim.dead == OwnerObservation("z", None)


def test_a_leader_that_resigned_and_left_is_replaced_at_once() -> None:
    c = coordinator()
    alive(c)
    follow(c, "z")
    watch(c, T0 + 2, 5)
    acts = watch(c, T0 + 3, None)
    assert of(acts, ReadLeader) and not of(acts, ClaimLeadership)  # gone: read the item again at once
    [claim] = of(c.step(T0 + 3, [LeaderRead(Leader(None, 2))]), ClaimLeadership)
    assert claim == ClaimLeadership(Leader(None, 2), None)


def test_a_lost_claim_reads_the_item_again() -> None:
    c = coordinator()
    alive(c)
    c.step(T0 + 1, [])
    [claim] = of(c.step(T0 + 1, [LeaderRead(None)]), ClaimLeadership)
    acts = c.step(T0 + 1, [LeadershipResult(claim, Result.CONFLICT, error="condition")])
    assert not c.leadership.leading
    assert of(acts, ReadLeader)


def test_a_claim_whose_write_failed_is_made_again_after_a_growing_backoff_not_at_once() -> None:
    c = coordinator()
    alive(c)
    now = T0 + 1
    c.step(now, [])
    [claim] = of(c.step(now, [LeaderRead(None)]), ClaimLeadership)
    pauses = []
    for _ in range(6):  # DynamoDB throttles the claim, again and again
        acts = c.step(now, [LeadershipResult(claim, Result.FAILED, error="throttled: ThrottledError(...)")])
        assert not of(acts, ReadLeader) and not of(acts, ClaimLeadership)  # before: read and claimed at once
        due = c.leadership.next_due()
        pauses.append(due - now)
        assert not of(c.step(due - 0.001, []), ReadLeader)
        now = due
        assert of(c.step(now, []), ReadLeader)
        [claim] = of(c.step(now, [LeaderRead(None)]), ClaimLeadership)
    assert 0.05 <= pauses[0] <= 0.1 and 1.0 <= pauses[-1] <= 2.0, pauses  # 0.1 s doubling, capped at 2 s
    # A claim lost to another worker is read again at once, and counts the failures afresh.
    acts = c.step(now, [LeadershipResult(claim, Result.CONFLICT, error="condition")])
    assert of(acts, ReadLeader)
    [claim] = of(c.step(now, [LeaderRead(None)]), ClaimLeadership)
    c.step(now, [LeadershipResult(claim, Result.FAILED, error="throttled")])
    assert c.leadership.next_due() - now <= 0.1


def test_the_new_leader_reassigns_the_replaced_leaders_leases_at_once() -> None:
    c = coordinator()
    alive(c)
    follow(c, "z")
    watch(c, T0 + 2, 6)
    [claim] = of(watch(c, T0 + 12, 6), ClaimLeadership)
    acts = c.step(T0 + 12, [LeadershipResult(claim, Result.OK, Leader("a", 2))])
    assert of(acts, ReadTable)
    c.step(T0 + 12, [HeartbeatResult(T0 + 12, Result.OK)])
    z_lease = Lease("s", "sh0", owner="z", epoch=3)
    snap = TableRead(TableSnapshot((z_lease,), (worker("a"), worker("z", 6))))
    [assign] = writes(c.step(T0 + 12.1, [snap]), WriteKind.ASSIGN)
    assert (assign.lease, assign.to, assign.dead_owner) == (z_lease, "a", OwnerObservation("z", 6))


def test_a_fenced_leader_stops_planning_and_reads_the_item_again() -> None:
    c = coordinator()
    alive(c)
    lead(c)
    acts = c.step(T0 + 2, [HeartbeatResult(T0 + 2, Result.CONFLICT, fenced=True)])
    assert not c.leadership.leading and not c.duties.active
    assert of(acts, ReadLeader)
    assert not writes(c.step(T0 + 2.1, [table((Lease("s", "x"),), "a")]), WriteKind.ASSIGN)
    # The item still names us, but the read is eventually consistent: confirm with a conditional claim.
    [claim] = of(c.step(T0 + 2.2, [LeaderRead(Leader("a", 1))]), ClaimLeadership)
    assert claim.seen == Leader("a", 1) and claim.dead is None
    assert not c.leadership.leading
    c.step(T0 + 2.3, [LeadershipResult(claim, Result.OK, Leader("a", 2))])  # nobody took it: lead on
    assert c.leadership.leading and c.duties.active


def test_a_stale_read_naming_a_fenced_leader_does_not_make_it_lead_again() -> None:
    c = coordinator()
    alive(c)
    lead(c)
    c.step(T0 + 2, [HeartbeatResult(T0 + 2, Result.CONFLICT, fenced=True)])
    # Another worker claimed epoch 2 already; our eventually consistent read still shows epoch 1, ours.
    [claim] = of(c.step(T0 + 2.2, [LeaderRead(Leader("a", 1))]), ClaimLeadership)
    acts = c.step(T0 + 2.3, [LeadershipResult(claim, Result.CONFLICT, None, error="condition failed")])
    assert not c.leadership.leading and not c.duties.active
    assert of(acts, ReadLeader)  # read again, at once
    c.step(T0 + 2.4, [LeaderRead(Leader("b", 2))])
    assert not c.leadership.leading and c.leadership.leader_id == "b"


def test_a_stale_leader_whose_heartbeat_window_closed_plans_nothing() -> None:
    c = coordinator()
    alive(c)
    lead(c)
    # Paused: no heartbeat since T0, so the window closed at T0 + 8; another worker may lead by now.
    assert not writes(c.step(T0 + 9, [table((Lease("s", "x"),), "a", "b")]), WriteKind.ASSIGN)


# -- the leader's duties ----------------------------------------------------------------------------------
def leading(c=None, now: float = T0 + 1):  # type: ignore[no-untyped-def]
    c = c or coordinator()
    alive(c)
    lead(c, now)
    return c


def test_the_leader_reads_the_table_each_scan_interval_and_discovers_after_its_first_read() -> None:
    c = leading()
    assert not of(c.step(T0 + 1.5, []), Discover)
    acts = c.step(T0 + 1.5, [table((), "a")])
    assert of(acts, Discover) == [Discover((), ("s",), LEASES.max_moves_per_second)]
    assert not of(c.step(T0 + 1.9, []), ReadTable)
    assert of(c.step(T0 + 2.0, []), ReadTable)


def test_the_leader_assigns_unowned_leases_evenly_and_its_own_take_starts_at_once() -> None:
    c = leading()
    ls = tuple(Lease("s", f"sh{i}") for i in range(4))
    acts = c.step(T0 + 1.5, [table(ls, "a", "b")])
    assigned = writes(acts, WriteKind.ASSIGN)
    assert sorted(w.to for w in assigned) == ["a", "a", "b", "b"]
    mine = next(w for w in assigned if w.to == "a")
    new = Lease("s", mine.lease.shard_id, owner="a", epoch=1)
    acts = c.step(T0 + 1.6, [ActionResult(WriteKind.ASSIGN, mine.lease, Result.OK, new=new, to="a")])
    assert new.key in c.owned


def test_the_leader_asks_owners_above_their_share_to_hand_over_to_a_new_worker() -> None:
    c = leading()
    c.step(T0 + 1.2, [table((), "a")])  # our first read: b and n register after it (seen alive at once)
    ls = tuple(Lease("s", f"sh{i}", owner="b", epoch=1) for i in range(4))
    reqs = writes(c.step(T0 + 1.5, [table(ls, "a", "b", "n")]), WriteKind.REQUEST)
    assert sorted(w.to for w in reqs) == ["a", "n"]  # b keeps two


def test_a_conflicting_write_makes_the_leader_read_the_table_again_at_once() -> None:
    c = leading()
    acts = c.step(T0 + 1.5, [table((Lease("s", "x"),), "a", "b")])
    [w] = writes(acts, WriteKind.ASSIGN)
    acts = c.step(T0 + 1.6, [ActionResult(WriteKind.ASSIGN, w.lease, Result.CONFLICT, to=w.to)])
    assert of(acts, ReadTable)


def test_a_dead_owner_is_replaced_only_after_a_whole_lease_of_silence_then_its_item_forgotten() -> None:
    c = leading()
    ls = (Lease("s", "x", owner="d", epoch=2),)
    for t in range(2, 11):
        c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)])
        assert not writes(c.step(T0 + t, [table(ls, "a", "d", hb=5)]), WriteKind.ASSIGN)
    c.step(T0 + 12, [HeartbeatResult(T0 + 12, Result.OK)])
    [w] = writes(c.step(T0 + 12, [table(ls, "a", "d", hb=5)]), WriteKind.ASSIGN)
    assert w.dead_owner is not None and w.dead_owner.worker_id == "d"
    acts: list = []
    for t in range(13, 33):
        c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)])
        acts += c.step(T0 + t, [table((), "a", "d", hb=5)])
    assert [f.worker.worker_id for f in of(acts, Forget)] == ["d"]  # once, after 3 lease durations


def test_the_leader_reads_the_table_again_the_moment_an_owner_would_turn_dead_not_at_its_next_scan() -> None:
    c = leading()
    ls = (Lease("s", "x", owner="d", epoch=2),)
    c.step(T0 + 1.4, [table(ls, "a", "d", hb=5)])  # d's heartbeat first seen at T0 + 1.4: dead from T0 + 11.4
    for t in range(2, 12):  # scans every second; the answers come at once
        assert of(c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)]), ReadTable)
        assert not writes(c.step(T0 + t, [table(ls, "a", "d", hb=5)]), WriteKind.ASSIGN)
    assert c.duties.next_due() == T0 + 11.4  # not T0 + 12, the next scan
    assert of(c.step(T0 + 11.4, [HeartbeatResult(T0 + 11.4, Result.OK)]), ReadTable)
    [w] = writes(c.step(T0 + 11.4, [table(ls, "a", "d", hb=5)]), WriteKind.ASSIGN)
    assert w.dead_owner is not None and w.dead_owner.worker_id == "d"


def test_an_owner_whose_heartbeat_moves_costs_the_leader_no_extra_read() -> None:
    c = leading()
    ls = (Lease("s", "x", owner="d", epoch=2),)
    for t in range(2, 30):
        c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)])
        c.step(T0 + t, [])
        c.step(T0 + t, [table(ls, "a", "d", hb=t // 4)])  # a beat every 4 s, as a worker's heartbeat lane
        assert c.duties.next_due() == T0 + t + 1  # the next scan: nobody is about to turn dead


def test_a_leader_shutting_down_asks_others_to_take_its_leases_then_resigns() -> None:
    c = leading()
    c.step(T0 + 1.1, [table((), "a")])  # our first read: b registers after it (seen alive at once)
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 1.3, [ShutdownRequested()])
    acts = c.step(T0 + 1.3, [table((mine,), "a", "b")])
    assert [(w.lease.key, w.to) for w in writes(acts, WriteKind.REQUEST)] == [(mine.key, "b")]


def test_the_last_worker_releases_at_once_and_resigns_before_deregistering() -> None:
    c = leading()
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 1.3, [ShutdownRequested()])
    acts = c.step(T0 + 1.3, [table((mine,), "a")])
    assert Stop(mine.key, ShutdownReason.REQUESTED, last_poll=False) in acts  # nobody reads after it
    [release] = writes(
        c.step(T0 + 1.4, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.RELEASE
    )
    c.step(T0 + 1.5, [ActionResult(WriteKind.RELEASE, release.lease, Result.OK)])
    acts = drained(c, T0 + 1.6)
    assert acts[-2:] == [ResignLeadership(Leader("a", 1)), Deregister()]


def test_a_leader_leaving_plans_its_hand_offs_at_once_from_a_table_read_within_a_scan_interval() -> None:
    c = leading()
    c.step(T0 + 1.1, [table((), "a")])  # our first read: b registers after it (seen alive at once)
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 1.5, [table((mine,), "a", "b")])  # the read that shows it ours
    acts = c.step(T0 + 1.9, [ShutdownRequested()])
    assert [(w.lease.key, w.to) for w in writes(acts, WriteKind.REQUEST)] == [(mine.key, "b")]
    assert not of(acts, ReadTable)  # no second read of the whole table before the shards move


def test_the_last_worker_leaving_stops_its_shards_at_once_from_a_recent_read() -> None:
    c = leading()
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 1.5, [table((mine,), "a")])
    acts = c.step(T0 + 2.0, [ShutdownRequested()])
    assert Stop(mine.key, ShutdownReason.REQUESTED, last_poll=False) in acts and not of(acts, ReadTable)


def test_a_leader_leaving_reads_the_table_first_when_its_read_is_old_or_misses_a_lease_of_its_own() -> None:
    stale = leading()
    mine = owning(stale, now=T0 + 1.2)
    stale.step(T0 + 1.5, [table((mine,), "a", "b")])
    stale.step(T0 + 2.6, [HeartbeatResult(T0 + 2.6, Result.OK)])
    acts = stale.step(T0 + 2.6, [ShutdownRequested()])  # 1.1 s after the read: more than a scan interval
    assert of(acts, ReadTable) and not writes(acts, WriteKind.REQUEST)
    assert not [a for a in acts if isinstance(a, Stop)]
    # The read shows one lease of ours, the other came to us after it.
    missing = leading()
    missing.step(T0 + 1.1, [table((), "a")])  # our first read: b registers after it (seen alive at once)
    first = owning(missing, now=T0 + 1.2)
    missing.step(T0 + 1.5, [table((first,), "a", "b")])
    owning(missing, "sh1", now=T0 + 1.6)
    acts = missing.step(T0 + 1.7, [ShutdownRequested()])
    assert of(acts, ReadTable) and not writes(acts, WriteKind.REQUEST)
    # Its reply plans both.
    acts = missing.step(T0 + 1.8, [table((first, Lease("s", "sh1", owner="a", epoch=1)), "a", "b")])
    assert sorted(w.to for w in writes(acts, WriteKind.REQUEST)) == ["b", "b"]


def test_a_leader_leaving_whose_heartbeat_is_not_current_reads_the_table_rather_than_plan() -> None:
    c = leading()
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 8.4, [table((mine,), "a", "b")])  # a recent read, but our heartbeat's window closed at T0 + 8
    acts = c.step(T0 + 8.5, [ShutdownRequested()])
    assert of(acts, ReadTable) and not writes(acts, WriteKind.REQUEST)


def test_a_stalled_hand_off_is_reported_once_though_the_leader_starts_leaving_meanwhile() -> None:
    c = leading()
    mine = owning(c, now=T0 + 1.2)  # so that the shutdown lasts: it waits for this one to be taken
    asked = Lease("s", "x", owner="b", epoch=1, handoff_to="c")  # a request that stands, between others
    stalled: list[Metric] = []
    for t in (x / 2 for x in range(4, 52)):
        c.step(T0 + t, [HeartbeatResult(T0 + t, Result.OK)])
        if t == 24.5:
            stalled += of(c.step(T0 + t, [ShutdownRequested()]), Metric)
        acts = c.step(T0 + t, [table((asked, mine), "a", "b", "c", hb=int(t * 2))])
        stalled += [m for m in of(acts, Metric) if m.name == "HandoffsStalled"]
    assert len(stalled) == 1  # after handoff_timeout (20 s) of watching, and not again


def test_the_step_that_ends_a_leaders_shutdown_reads_no_table() -> None:
    c = leading()
    mine = owning(c, now=T0 + 1.2)
    c.step(T0 + 1.5, [table((mine,), "a")])
    c.step(T0 + 1.6, [ShutdownRequested()])
    [release] = writes(
        c.step(T0 + 1.7, [ShardFinished(mine.key, mine.epoch, Outcome.STOPPED)]), WriteKind.RELEASE
    )
    c.step(T0 + 2.6, [ActionResult(WriteKind.RELEASE, release.lease, Result.OK)])  # a read was due
    acts = drained(c, T0 + 2.7)
    assert acts[-2:] == [ResignLeadership(Leader("a", 1)), Deregister()] and not of(acts, ReadTable)


def test_the_leaders_moves_are_paced_and_it_plans_again_as_the_budget_allows() -> None:
    from consumer.config import LeaseConfig

    c = coordinator(lease=LeaseConfig(max_moves_per_second=10))
    alive(c)
    lead(c)
    ls = tuple(Lease("s", f"sh{i:03d}") for i in range(25))
    acts = c.step(T0 + 1.5, [table(ls, "a", "b")])
    assert len(writes(acts, WriteKind.ASSIGN)) == 10  # one second's worth saved up
    assert not of(c.step(T0 + 1.6, []), ReadTable)
    assert of(c.step(T0 + 1.7, []), ReadTable)  # a fifth of a second's worth has come in
    acts = c.step(T0 + 1.7, [table(ls[10:], "a", "b")])
    assert len(writes(acts, WriteKind.ASSIGN)) == 2
    assert LEASES.max_moves_per_second == 200


def test_a_leader_registered_again_with_its_old_counter_is_watched_afresh() -> None:
    from consumer.leases.model import WorkerItem as Item

    c = coordinator("b")
    alive(c, T0)
    c.step(T0, [])
    c.step(T0, [LeaderRead(Leader("z", 1))])
    c.step(T0 + 0.1, [LeaderWatched("z", Item("z", heartbeat=4, incarnation="first"))])
    # z was forgotten and came back with a new incarnation whose counter is 4 again, 9 s later: a move.
    c.step(T0 + 9, [HeartbeatResult(T0 + 9, Result.OK)])
    c.step(T0 + 9, [LeaderWatched("z", Item("z", heartbeat=4, incarnation="second"))])
    c.step(T0 + 11, [HeartbeatResult(T0 + 11, Result.OK)])
    assert not of(
        c.step(T0 + 11, [LeaderWatched("z", Item("z", heartbeat=4, incarnation="second"))]), ClaimLeadership
    )
    c.step(T0 + 19.5, [HeartbeatResult(T0 + 19.5, Result.OK)])
    [claim] = of(
        c.step(T0 + 19.5, [LeaderWatched("z", Item("z", heartbeat=4, incarnation="second"))]), ClaimLeadership
    )
    assert claim.dead == OwnerObservation("z", 4, "second")


def test_a_leader_polls_its_item_at_the_quiet_cadence_while_its_fleet_rests_and_fast_while_leases_move() -> (
    None
):
    c = leading()
    owner = tuple(Lease("s", f"sh{i}", owner="a", epoch=1) for i in range(2))
    c.step(T0 + 1.5, [table(owner, "a")])  # all ours, nothing to move: at rest
    quiet = [t for t in range(1, 50) if of(c.step(T0 + 1.5 + t / 10, []), ReadInbox)]
    assert 4 <= len(quiet) <= 6  # once a second, as a member at rest
    ls = tuple(Lease("s", f"sh{i}", owner="b", epoch=1) for i in range(4))
    assert writes(c.step(T0 + 7.0, [table(ls, "a", "b")]), WriteKind.REQUEST)  # a hand-off to us is asked
    fast = [t for t in range(1, 40) if of(c.step(T0 + 7.0 + t / 10, []), ReadInbox)]
    assert len(fast) >= 30  # every 0.1 s (at most 4 at the quiet cadence): the transfer is heard at once


def _inbox_reads(c, start: float, seconds: float) -> int:  # type: ignore[no-untyped-def]
    """How many times ``c`` reads its own item, stepped every 0.1 s for ``seconds`` after ``start``."""
    return len([t for t in range(1, round(seconds * 10)) if of(c.step(start + t / 10, []), ReadInbox)])


def test_a_leader_taking_free_leases_itself_starts_them_from_its_writes_and_keeps_the_quiet_cadence() -> None:
    c = leading()
    free = tuple(Lease("s", f"sh{i}") for i in range(3))
    assigns = writes(c.step(T0 + 1.5, [table(free, "a")]), WriteKind.ASSIGN)
    assert sorted(w.to for w in assigns) == ["a", "a", "a"]
    started = []
    for w in assigns:
        new = replace(w.lease, owner="a", epoch=1)
        started += of(c.step(T0 + 1.5, [ActionResult(WriteKind.ASSIGN, w.lease, Result.OK, new, "a")]), Start)
    assert sorted(s.lease.shard_id for s in started) == ["sh0", "sh1", "sh2"]  # not waiting for our item
    assert _inbox_reads(c, T0 + 1.5, 5) <= 6  # once a second: nothing comes to us by another's hand


def test_a_leader_moving_leases_between_other_workers_keeps_the_quiet_cadence() -> None:
    c = leading()
    ours = (owning(c, "sh0", now=T0 + 1.2), owning(c, "sh1", now=T0 + 1.2))
    c.step(T0 + 1.5, [table(ours, "a")])
    held = tuple(Lease("s", f"sh{i}", owner="b", epoch=1) for i in range(2, 6))
    c.step(T0 + 2.5, [HeartbeatResult(T0 + 2.5, Result.OK)])
    requests = writes(c.step(T0 + 2.5, [table((*ours, *held), "a", "b", "c")]), WriteKind.REQUEST)
    assert len(requests) == 2 and {(w.lease.owner, w.to) for w in requests} == {("b", "c")}  # a holds its 2
    assert _inbox_reads(c, T0 + 2.5, 5) <= 6


def test_a_leader_whose_assignment_to_itself_failed_polls_fast_to_hear_if_it_landed() -> None:
    c = leading()
    [w] = writes(c.step(T0 + 1.5, [table((Lease("s", "sh0"),), "a")]), WriteKind.ASSIGN)
    c.step(T0 + 1.5, [ActionResult(WriteKind.ASSIGN, w.lease, Result.FAILED, None, "a", "timed out")])
    assert _inbox_reads(c, T0 + 1.5, 4) >= 30
