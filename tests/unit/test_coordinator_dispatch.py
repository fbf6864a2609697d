"""The coordinator's event dispatch, walked: every kind of event in every situation a coordinator can be in.

mypy checks that ``Coordinator._handle`` has a case for every event type; this walk checks that each one is
routed where it belongs: what a member, a leader, a worker shutting down and a finished one may answer.
"""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest

from consumer.leases.model import Leader, Lease
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    ClaimLeadership,
    Discover,
    Discovered,
    Event,
    Forget,
    HeartbeatResult,
    InboxRead,
    LeaderRead,
    LeadershipResult,
    LeaderWatched,
    LeaseWrite,
    Outcome,
    OwnRead,
    ReadLeader,
    ReadTable,
    Reconciled,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    TableRead,
    WatchLeader,
    WriteKind,
)
from tests.unit.coordinator_support import T0, alive, coordinator, follow, lead, owning, worker

NOW = T0 + 2.0
MINE = Lease("s", "sh0", owner="a", epoch=1)
NEW = Lease("s", "sh9", owner="a", epoch=4)
LEADERS_WRITES = {WriteKind.ASSIGN, WriteKind.REQUEST, WriteKind.DECLINE}


def _samples() -> list[Event]:
    keys = (MINE.key, NEW.key)
    moved = Lease("s", "sh0", owner="b", epoch=2)
    asked = Lease("s", "sh0", owner="a", epoch=1, handoff_to="b", handoff_requested_ms=1)
    snapshot = TableSnapshot((MINE, Lease("s", "sh1")), (worker("a"), worker("b")))
    return [
        ShutdownRequested(),
        HeartbeatResult(NOW, Result.OK),
        HeartbeatResult(NOW, Result.CONFLICT, fenced=True),
        HeartbeatResult(NOW, Result.FAILED, error="timeout"),
        InboxRead(worker("a", inbox=9, expect=1, given=frozenset({NEW.key}))),
        InboxRead(worker("a", inbox=9, drain_requested=True)),
        InboxRead(None, error="refused"),
        InboxRead(None),
        OwnRead(keys, (MINE, NEW)),
        OwnRead(keys, (asked, NEW)),
        OwnRead(keys, (moved,)),
        OwnRead(keys, None, error="reset"),
        LeaderRead(Leader("z", 2)),
        LeaderRead(None),
        LeaderRead(None, error="refused"),
        LeaderWatched("z", worker("z", 7)),
        LeaderWatched("z", None),
        LeadershipResult(ClaimLeadership(None), Result.OK, Leader("a", 2)),
        LeadershipResult(ClaimLeadership(None), Result.CONFLICT, error="lost"),
        TableRead(snapshot),
        TableRead(None, error="throttled"),
        Reconciled(worker("a", generation=1), (MINE,), (MINE.key,)),
        Reconciled(worker("a", generation=1), (moved,), (MINE.key,)),
        Reconciled(None, None, error="refused"),
        Discovered(changed=True),
        Discovered(changed=False, more=True),
        *(ShardFinished(MINE.key, MINE.epoch, outcome) for outcome in Outcome),
        *(ActionResult(kind, MINE, result, to="a") for kind in WriteKind for result in Result),
        ActionResult(WriteKind.ASSIGN, Lease("s", "sh1"), Result.OK, new=NEW, to="a"),
    ]


def _member() -> Coordinator:
    c = coordinator()
    alive(c)
    follow(c, "z")
    owning(c, MINE.shard_id, MINE.epoch, now=T0 + 1)
    return c


def _leader() -> Coordinator:
    c = coordinator()
    alive(c)
    lead(c)
    owning(c, MINE.shard_id, MINE.epoch, now=T0 + 1)
    return c


def _shutting_down() -> Coordinator:
    c = _member()
    c.step(T0 + 1.5, [ShutdownRequested()])
    assert c.shutting_down
    return c


def _leader_shutting_down() -> Coordinator:
    c = _leader()
    c.step(T0 + 1.5, [ShutdownRequested()])
    assert c.shutting_down and c.leadership.leading
    return c


def _fenced() -> Coordinator:
    c = _leader()
    c.step(T0 + 1.5, [HeartbeatResult(T0 + 1.5, Result.CONFLICT, fenced=True)])
    assert c.membership.fenced and not c.leadership.leading
    return c


def _done() -> Coordinator:
    c = _shutting_down()
    c.step(T0 + 30, [])  # past the shutdown deadline
    assert c.done
    return c


SITUATIONS: dict[str, Callable[[], Coordinator]] = {
    "member": _member,
    "leader": _leader,
    "shutting down": _shutting_down,
    "leader shutting down": _leader_shutting_down,
    "fenced": _fenced,
    "done": _done,
}


def test_the_samples_cover_every_event_type() -> None:
    assert {type(ev) for ev in _samples()} == set(typing.get_args(Event))


def _leaders_work(actions: list[Action]) -> list[Action]:
    return [
        a
        for a in actions
        if isinstance(a, ReadTable | Discover | Forget)
        or (isinstance(a, LeaseWrite) and a.kind in LEADERS_WRITES)
    ]


@pytest.mark.parametrize("situation", SITUATIONS)
def test_every_event_is_routed_where_it_belongs(situation: str) -> None:
    for ev in _samples():
        c = SITUATIONS[situation]()
        before = set(c.owned)
        actions = c.step(NOW, [ev])
        what = f"{situation} / {ev!r}: {actions!r}"
        if situation == "done":
            assert actions == [] and c.done and not c.owned, what
            continue
        if not c.leadership.leading:
            assert not _leaders_work(actions), what
        if c.shutting_down:
            assert not [
                a for a in actions if isinstance(a, Start | ClaimLeadership | ReadLeader | WatchLeader)
            ]
        for a in actions:
            if isinstance(a, Stop):
                assert a.key in before, what  # only a consumer of ours is ever stopped
            if isinstance(a, Start):
                assert a.lease.key not in before and a.lease.key in c.owned, what
            if isinstance(a, LeaseWrite) and a.kind not in LEADERS_WRITES:
                assert a.lease.key in before | set(c.owned), what  # only our own leases are written
