"""Helpers for stepping a coordinator on made-up time: no threads, no sleeps, no I/O."""

from __future__ import annotations

from typing import Any

from consumer.config import LeaseConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.leases.model import Leader, Lease, WorkerItem
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.messages import (
    Action,
    ClaimLeadership,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    LeaderRead,
    LeadershipResult,
    LeaseWrite,
    OwnRead,
    ReadInbox,
    ReadLeader,
    ReadOwn,
    ReadTable,
    Renew,
    Result,
    Start,
    WriteKind,
)

T0 = 1000.0
WALL = 1_700_000_000_000
LEASES = LeaseConfig(
    lease_duration=10.0,
    safety_margin=2.0,
    scan_interval=1.0,
    inbox_poll_interval=0.1,
    idle_poll_interval=1.0,
    leader_check_interval=1.0,
)


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


def worker(wid: str, hb: int = 1, *, wall: int = WALL, draining: bool = False, **kw: Any) -> WorkerItem:
    return WorkerItem(
        wid,
        heartbeat=hb,
        heartbeat_ms=wall,
        started_ms=wall - 1000,
        draining=draining,
        streams=frozenset({"s"}),
        **kw,
    )


def of(actions: list[Action], kind: type) -> list[Any]:
    return [a for a in actions if isinstance(a, kind)]


def writes(actions: list[Action], kind: WriteKind) -> list[LeaseWrite]:
    return [a for a in actions if isinstance(a, LeaseWrite) and a.kind is kind]


def alive(c: Coordinator, now: float = T0) -> None:
    """Start-up: heartbeat written, so the worker may act on leases until now + 8 s."""
    first = c.step(now, [])
    assert of(first, Heartbeat) and of(first, ReadInbox)
    assert of(c.step(now, [HeartbeatResult(now, Result.OK)]), Renew) == [Renew(now)]


def follow(c: Coordinator, leader: str = "z", now: float = T0 + 1.0) -> None:
    """Learn that ``leader`` leads (a follower from then on)."""
    assert of(c.step(now, []), ReadLeader)
    c.step(now, [LeaderRead(Leader(leader, 1))])


def lead(c: Coordinator, now: float = T0 + 1.0) -> list[Action]:
    """Claim the absent leadership item; returns the actions of the step that follows the claim."""
    assert of(c.step(now, []), ReadLeader)
    [claim] = of(c.step(now, [LeaderRead(None)]), ClaimLeadership)
    assert claim == ClaimLeadership(None, None)
    acts = c.step(now, [LeadershipResult(claim, Result.OK, Leader(c.id, 1))])
    assert c.leadership.leading and of(acts, ReadTable)
    return acts


def given(c: Coordinator, lease: Lease, now: float = T0, inbox: int = 1) -> list[Action]:
    """Our item says ``lease`` was given to us; read it and return the actions of that read."""
    item = worker(c.id, inbox=inbox, given=frozenset({lease.key}))
    [read] = of(c.step(now, [InboxRead(item)]), ReadOwn)
    assert lease.key in read.keys
    held = tuple(o.lease for k, o in c.owned.items() if k != lease.key)  # unchanged
    return c.step(now, [OwnRead(read.keys, (lease, *held))])


def owning(c: Coordinator, shard: str = "sh0", epoch: int = 1, now: float = T0) -> Lease:
    """Own ``shard`` (given to us by the leader)."""
    mine = Lease("s", shard, owner=c.id, epoch=epoch)
    inbox = len(c.owned) + 1
    assert Start(mine) in given(c, mine, now, inbox=inbox)
    return mine


def drained(c: Coordinator, now: float) -> list[Action]:
    """A shutting-down worker's draining heartbeat lands, then its final read finds nothing given to it: the
    actions of that read (the shutdown ends there once nothing else is under way)."""
    acts = c.step(now, [HeartbeatResult(now, Result.OK, draining=True)])
    assert ReadInbox(final=True) in acts, acts
    return c.step(now, [InboxRead(worker(c.id), final=True)])
