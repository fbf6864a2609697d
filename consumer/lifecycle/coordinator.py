"""The worker's decisions as a pure step: ``step(now, events) -> actions``. No I/O, no threads.

Every worker is a member: it heartbeats, polls its own item (its inbox), reads its own leases when the inbox
says something changed, starts the leases given to it, hands a lease on when the leader asks, and drains at
shutdown. One worker at a time also leads (``Leadership``): it reads the whole table and plans for the fleet
(``LeaderDuties``). So the table is read in full once per scan interval, not once per worker, and a member's
reads cost the same whatever the size of the fleet. ``next_due`` says when to step again if nothing happens.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from consumer.config import WorkerConfig
from consumer.leases.model import Lease
from consumer.lifecycle import ownership as own
from consumer.lifecycle.leader_duties import LeaderDuties
from consumer.lifecycle.leadership import Leadership
from consumer.lifecycle.membership import Membership
from consumer.lifecycle.messages import (
    AckGiven,
    Action,
    ActionResult,
    Deregister,
    Discovered,
    Event,
    HeartbeatResult,
    InboxRead,
    LeaderRead,
    LeadershipResult,
    LeaderWatched,
    Metric,
    Outcome,
    OwnRead,
    ReadOwn,
    Reconciled,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    TableRead,
    Tick,
    Wake,
    WriteKind,
)
from consumer.lifecycle.ownership import Ownership, Phase
from consumer.lifecycle.processor import ShutdownReason
from consumer.logs import log_event

__all__ = ["Coordinator", "backoff"]

logger = logging.getLogger(__name__)

_LEADERS_WRITES = frozenset({WriteKind.ASSIGN, WriteKind.REQUEST, WriteKind.DECLINE})
_OWN_READ_RETRY = 0.5


def backoff(failures: int) -> float:
    """Capped exponential backoff with jitter for lease-table writes that failed transiently."""
    return min(2.0, 0.1 * 2.0 ** (failures - 1)) * (0.5 + random.random() / 2)


class Coordinator:
    def __init__(self, config: WorkerConfig, now: float) -> None:
        self.id = config.worker_id
        self._cfg = config
        self._lc = config.lease
        self.membership = Membership(self.id, config.lease, now)
        self.leadership = Leadership(self.id, config.lease, now)
        self.duties = LeaderDuties(self.id, frozenset(s.name for s in config.streams), config.lease)
        self.owned: dict[str, Ownership] = {}
        self._gives: dict[str, tuple[str, float]] = {}  # asked by the leader: key -> (to, not before)
        self._read_own_at = float("inf")  # when to read our leases (and those given to us)
        self._was_fenced = False
        self._wake_leader: str | None = None
        self.shutting_down = False
        self._deadline = self._release_at = float("inf")
        self.done = False
        self._now = now
        # Called with ``now`` at the start of every step: the liveness hook (consumer.health.Heartbeat). The
        # step itself stays pure; whoever drives it decides what a step's pulse does.
        self.on_step: Callable[[float], None] | None = None
        self._handlers: dict[type, Callable[[Any], list[Action]]] = {
            Tick: lambda _ev: [],
            HeartbeatResult: lambda ev: self.membership.on_heartbeat(ev, self._now),
            InboxRead: self._on_inbox,
            OwnRead: lambda ev: self._on_own(ev.asked, ev.leases, ev.error),
            Reconciled: self._on_reconciled,
            LeaderRead: lambda ev: self.leadership.on_read(ev, self._now),
            LeaderWatched: lambda ev: self.leadership.on_watched(ev, self._now),
            LeadershipResult: self._on_claimed,
            TableRead: self._on_table,
            Discovered: lambda ev: self.duties.on_discovered(ev, self._now),
            ShardFinished: self._finished,
            ActionResult: self._written,
            ShutdownRequested: lambda _ev: [] if self.shutting_down else self._start_shutdown(),
        }

    # -- the step ---------------------------------------------------------------------------------
    def step(self, now: float, events: Sequence[Event]) -> list[Action]:
        """Take in ``events`` at monotonic time ``now`` and return the actions to carry out, in order. No
        decision reads a wall clock: ours or, through the table's stamps, another worker's."""
        if self.on_step is not None:
            self.on_step(now)
        self._now = now
        actions: list[Action] = []
        for ev in events:
            actions += self._handlers[type(ev)](ev)
            self._fenced()
        if self.done:
            return actions
        # The shell runs actions in this order, one at a time: what a shard waits for comes first (a
        # transfer, the read that starts a lease given to us), then membership, then the leader's work.
        actions += self._due_gives(now)
        for o in list(self.owned.values()):
            if (write := o.write()) is not None and now >= o.retry_at:
                self.owned[o.key] = replace(o, retry_at=float("inf"))  # in flight until its result
                actions.append(write)
        if now >= self._read_own_at:
            self._read_own_at = float("inf")  # until its result
            actions.append(ReadOwn(tuple(sorted({*self.owned, *self.membership.given}))))
        actions += self.membership.due(now, tuple(self.owned), self._busy())
        if not self.shutting_down:
            actions += self.leadership.due(now)
        actions += self.duties.due(now)
        if self.shutting_down:
            actions += self._shutdown_due(now)
        return actions

    def next_due(self) -> float:
        due = [
            self.membership.next_due(),
            self.leadership.next_due() if not self.shutting_down else float("inf"),
            self.duties.next_due(),
            self._read_own_at,
            *(at for _, at in self._gives.values()),
            *(o.retry_at for o in self.owned.values() if o.write()),
        ]
        if self.shutting_down:
            due += [self._deadline, self._release_at]
        return min(due)

    def _busy(self) -> bool:
        """Poll our item fast: we lead, shut down, or a lease of ours is on the move."""
        moving = any(o.phase not in (Phase.RUNNING, Phase.HALTED) for o in self.owned.values())
        return self.leadership.leading or self.shutting_down or bool(self._gives) or moving

    # -- membership -------------------------------------------------------------------------------
    def _fenced(self) -> None:
        """Somebody took a lease of ours, or leadership, after we were silent too long: lead no more until
        the leadership item says we still do."""
        if self.membership.fenced and not self._was_fenced:
            self.leadership.fenced(self._now)
            self.duties.end()
        self._was_fenced = self.membership.fenced

    def _on_inbox(self, ev: InboxRead) -> list[Action]:
        signals = self.membership.on_inbox(ev, self._now)
        if signals.scan_now:
            self.duties.scan_soon(self._now)
        if signals.read_own:
            self._read_own_at = min(self._read_own_at, self._now)
        if signals.drain_requested and not self.shutting_down:
            log_event(logger, "drain_requested", worker=self.id)
            return self._start_shutdown()
        return []

    def _on_reconciled(self, ev: Reconciled) -> list[Action]:
        if self.membership.on_reconciled(ev, self._now):
            return self._on_own(ev.asked, ev.leases, "")
        return []

    def _on_own(self, asked: tuple[str, ...], leases: tuple[Lease, ...] | None, error: str) -> list[Action]:
        """Our leases as stored: drop those that moved on, note hand-off requests, start what we were given."""
        if leases is None:
            log_event(logger, "own_read_failed", logging.WARNING, error=error)
            self._read_own_at = min(self._read_own_at, self._now + _OWN_READ_RETRY)
            return []
        current = {lease.key: lease for lease in leases}
        actions: list[Action] = []
        for key in set(asked) & set(self.owned):
            o, lease = self.owned[key], current.get(key)
            if lease is None or lease.owner != self.id or lease.epoch != o.lease.epoch:
                log_event(logger, "lease_lost", logging.WARNING, worker=self.id, lease=key)
                self._gives.pop(key, None)
                actions += self._apply(key, own.lose(o))
            elif o.phase in (Phase.RUNNING, Phase.HALTED):
                self.owned[key] = replace(o, lease=lease)
        for key in sorted(set(asked) - set(self.owned)):
            lease = current.get(key)
            if lease is not None and lease.owner == self.id and not lease.ended:
                log_event(logger, "lease_received", worker=self.id, lease=key, epoch=lease.epoch)
                actions += self._pass_on(lease) if self.shutting_down else self._own(lease)
        for key in set(asked) & set(self.owned):
            o = self.owned[key]
            to = o.lease.handoff_to
            if (
                o.phase in (Phase.RUNNING, Phase.HALTED)
                and to not in (None, self.id)
                and key not in self._gives
            ):
                # The leader woke the requester when it asked; give it one idle poll to be listening.
                self._gives[key] = (to or "", self._now + self._lc.idle_poll)
        read_given = frozenset(asked) & self.membership.given
        return actions + ([AckGiven(read_given)] if read_given else [])

    # -- leadership -------------------------------------------------------------------------------
    def _on_claimed(self, ev: LeadershipResult) -> list[Action]:
        if self.leadership.on_claimed(ev, self._now):
            self.duties.begin(self._now, ev.claim.dead)
        return []

    def _on_table(self, ev: TableRead) -> list[Action]:
        if ev.snapshot is None:
            log_event(logger, "scan_failed", logging.WARNING, error=ev.error)
            return []
        if not self.duties.active:
            return []
        p = self.duties.on_table(ev.snapshot, self._now, self.shutting_down)
        if not self.membership.valid(self._now):  # our heartbeat is not current: plan nothing
            return []
        actions = self.duties.write(p, self._now)
        for lease in p.stranded:  # our own, with nobody to take them: release
            if (o := self.owned.get(lease.key)) is not None:
                actions += self._apply(lease.key, own.give(o, None, self._now))
        return actions

    # -- our leases -------------------------------------------------------------------------------
    def _own(self, lease: Lease) -> list[Action]:
        self.owned[lease.key] = Ownership(lease)
        return [Start(lease), Metric("LeasesTaken", 1, lease.stream, lease.shard_id)]

    def _successor(self, key: str) -> str | None:
        """Whom to hand a lease on to without being asked: the leader knows; anyone else releases it and
        the leader reassigns it."""
        if not self.duties.active:
            return None
        return self.duties.fleet.hand_to((key,), self._now)[key]

    def _pass_on(self, lease: Lease) -> list[Action]:
        """Given a lease while shutting down (the giver had not seen us draining yet): hand it on unread."""
        self.owned[lease.key] = own.passing_on(lease, self._successor(lease.key))
        return []

    def _due_gives(self, now: float) -> list[Action]:
        actions: list[Action] = []
        for key, (to, at) in list(self._gives.items()):
            if now < at:
                continue
            del self._gives[key]
            if (o := self.owned.get(key)) is not None:
                log_event(logger, "handoff_started", worker=self.id, lease=key, to=to)
                actions += self._apply(key, own.give(o, to, now))
        return actions

    def _apply(self, key: str, result: own.Step) -> list[Action]:
        new, actions = result
        if new is None:
            self.owned.pop(key, None)
        else:
            self.owned[key] = new
        return actions

    def _finished(self, ev: ShardFinished) -> list[Action]:
        o = self.owned.get(ev.key)
        if o is None:
            return []
        log_event(logger, "shard_finished", worker=self.id, lease=ev.key, outcome=ev.outcome.value)
        if ev.outcome in (Outcome.GAVE_UP, Outcome.FAILED):
            log_event(logger, "shard_given_up", logging.WARNING, lease=ev.key, why=ev.detail)
        successor = self._successor(ev.key) if ev.outcome in own.HANDED_ON else None
        return self._apply(ev.key, own.finished(o, ev, successor))

    def _written(self, ev: ActionResult) -> list[Action]:
        if ev.kind in _LEADERS_WRITES:
            actions = self.duties.on_written(ev, self._now)
            mine = ev.kind is WriteKind.ASSIGN and ev.to == self.id and ev.lease.key not in self.owned
            if mine and ev.new is not None:  # we planned it for ourselves
                actions += self._pass_on(ev.new) if self.shutting_down else self._own(ev.new)
            return actions
        o = self.owned.get(ev.lease.key)
        if o is None or ev.lease.epoch != o.lease.epoch:
            return []
        actions = self._apply(o.key, own.written(o, ev, self._now, backoff))
        if ev.kind is WriteKind.TRANSFER and ev.result is Result.OK and o.stop_asked_at is not None:
            ms = (self._now - o.stop_asked_at) * 1000
            actions.append(Metric("HandoffLatencyMs", ms, o.lease.stream, o.lease.shard_id))
        return actions

    # -- shutdown ---------------------------------------------------------------------------------
    def _start_shutdown(self) -> list[Action]:
        """Stop planning for ourselves, tell the fleet we are draining and wait for the leader to ask for each
        lease (it picks the least-loaded live workers). Whatever nobody asks for in time is released."""
        self.shutting_down = True
        self.membership.draining = True
        self.membership.heartbeat_now(self._now)  # tells the fleet we are draining: nobody hands us anything
        self._deadline = self._now + self._cfg.shutdown.deadline
        self._release_at = self._now + min(self._lc.lease_duration, self._cfg.shutdown.deadline) / 2
        log_event(logger, "shutdown_started", worker=self.id, leases=sorted(self.owned))
        leader = self.leadership.leader_id
        if self.duties.active:
            self.duties.scan_soon(self._now)
        elif leader is not None and leader != self.id:
            self._wake_leader = leader  # after the draining heartbeat of this same step
        return []

    def _shutdown_due(self, now: float) -> list[Action]:
        actions: list[Action] = [Wake(self._wake_leader)] if self._wake_leader else []
        self._wake_leader = None
        if now >= self._release_at:  # no leader asked in time: let the leader reassign them later
            self._release_at = float("inf")
            for key, o in sorted(self.owned.items()):
                if o.phase in (Phase.RUNNING, Phase.HALTED) and key not in self._gives:
                    log_event(logger, "shutdown_release", logging.WARNING, worker=self.id, lease=key)
                    actions += self._apply(key, own.give(o, None, now))
        if not self.owned or now >= self._deadline:
            actions += self._finish_shutdown()
        return actions

    def _finish_shutdown(self) -> list[Action]:
        actions: list[Action] = []
        for key, o in sorted(self.owned.items()):
            if o.consuming:  # missed the deadline: leave the lease to expire, never to two owners
                actions.append(Stop(key, ShutdownReason.LEASE_LOST))
        log_event(logger, "shutdown_complete", worker=self.id, left_to_expire=sorted(self.owned))
        self.owned.clear()
        self.done = True
        self.duties.end()
        return [*actions, *self.leadership.retire(), Deregister()]
