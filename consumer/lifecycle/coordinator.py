"""The worker's decisions as a pure step: ``step(now, wall_ms, events) -> actions``. No I/O, no threads.

It holds membership, what it knows of the fleet and the ownerships; asks the pure planner (through
``FleetView``) what to take, give and request; and turns every result the shell feeds back into the next
actions. ``next_due`` says when it wants to be stepped again even if nothing happens.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from consumer.config import WorkerConfig
from consumer.leases.model import Lease
from consumer.leases.planner import Plan
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle import ownership as own
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.membership import Membership
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    Deregister,
    Discover,
    Discovered,
    Event,
    Forget,
    HeartbeatResult,
    InboxRead,
    LeaseWrite,
    Metric,
    Outcome,
    ReadTable,
    Reconciled,
    Result,
    ShardFinished,
    ShutdownRequested,
    Start,
    Stop,
    TableRead,
    Tick,
    WriteKind,
)
from consumer.lifecycle.ownership import Ownership
from consumer.lifecycle.processor import ShutdownReason
from consumer.logs import log_event

__all__ = ["Coordinator", "backoff"]

logger = logging.getLogger(__name__)

_NOT_OWNED = frozenset({WriteKind.TAKE, WriteKind.REQUEST, WriteKind.DECLINE})


def backoff(failures: int) -> float:
    """Capped exponential backoff with jitter for lease-table writes that failed transiently."""
    return min(2.0, 0.1 * 2.0 ** (failures - 1)) * (0.5 + random.random() / 2)


class Coordinator:
    def __init__(self, config: WorkerConfig, now: float) -> None:
        self.id = config.worker_id
        self._cfg = config
        self._lc = config.lease
        self.membership = Membership(self.id, config.lease, now)
        self.fleet = FleetView(self.id, frozenset(s.name for s in config.streams), config.lease)
        self.owned: dict[str, Ownership] = {}
        self._next_scan = now
        self._next_discovery = now + config.lease.discovery_interval
        self._stall_reported: set[str] = set()
        self._avoid: dict[str, float] = {}  # leases we gave up on: others get the first chance to retry
        self.shutting_down = False
        self._deadline = float("inf")
        self.done = False
        self._now, self._wall_ms = now, 0
        self._handlers: dict[type, Callable[[Any], list[Action]]] = {
            Tick: lambda _ev: [],
            HeartbeatResult: lambda ev: self.membership.on_heartbeat(ev, self._now),
            InboxRead: self._on_inbox,
            Reconciled: self._on_reconciled,
            TableRead: self._on_table,
            Discovered: self._on_discovered,
            ShardFinished: self._finished,
            ActionResult: self._written,
            ShutdownRequested: lambda _ev: [] if self.shutting_down else self._start_shutdown(),
        }

    # -- the step ---------------------------------------------------------------------------------
    def step(self, now: float, wall_ms: int, events: Sequence[Event]) -> list[Action]:
        self._now, self._wall_ms = now, wall_ms
        actions: list[Action] = []
        for ev in events:
            actions += self._handlers[type(ev)](ev)
        if self.done:
            return actions
        actions += self.membership.due(now, len(self.owned))
        if now >= self._next_scan:  # while shutting down, only when the inbox says something came
            self._next_scan = float("inf") if self.shutting_down else now + self._lc.scan_interval
            actions.append(ReadTable())
        if not self.shutting_down and now >= self._next_discovery:
            self._next_discovery = now + self._lc.discovery_interval
            actions.append(Discover(self.fleet.snapshot.leases))
        for o in list(self.owned.values()):
            if (write := o.write()) is not None and now >= o.retry_at:
                self.owned[o.key] = replace(o, retry_at=float("inf"))  # in flight until its result
                actions.append(write)
        if self.shutting_down and (not self.owned or now >= self._deadline):
            actions += self._finish_shutdown()
        return actions

    def next_due(self) -> float:
        due = [self.membership.next_due(), *(o.retry_at for o in self.owned.values() if o.write())]
        due.append(self._deadline if self.shutting_down else self._next_discovery)
        return min([*due, self._next_scan])

    # -- membership and table events --------------------------------------------------------------
    def _on_inbox(self, ev: InboxRead) -> list[Action]:
        signals = self.membership.on_inbox(ev, self._now)
        if signals.scan_now:
            self._next_scan = self._now
        if signals.drain_requested and not self.shutting_down:
            log_event(logger, "drain_requested", worker=self.id)
            return self._start_shutdown()
        return []

    def _on_reconciled(self, ev: Reconciled) -> list[Action]:
        if self.membership.on_reconciled(ev, self._now) and ev.snapshot is not None:
            return self._observe(ev.snapshot, "fenced")
        return []

    def _on_table(self, ev: TableRead) -> list[Action]:
        if ev.snapshot is None:
            log_event(logger, "scan_failed", logging.WARNING, error=ev.error)
            return []
        actions = self._observe(ev.snapshot, "moved")
        if self.shutting_down or not self.membership.valid(self._now):
            return actions
        return actions + self._execute(self.fleet.plan(self._now, self._wall_ms))

    def _on_discovered(self, ev: Discovered) -> list[Action]:
        if ev.changed:
            self._next_scan = self._now
        return []

    def _observe(self, snap: TableSnapshot, why: str) -> list[Action]:
        """Take in a fresh read: drop ownerships that moved, start leases given to us, forget the dead."""
        snap = self.fleet.observe(snap, self._now)
        actions: list[Action] = []
        current = {lease.key: lease for lease in snap.leases}
        for key, o in list(self.owned.items()):
            lease = current.get(key)
            if lease is None or lease.owner != self.id or lease.epoch != o.lease.epoch:
                log_event(logger, "lease_lost", logging.WARNING, worker=self.id, lease=key, why=why)
                actions += self._apply(key, own.lose(o))
            elif o.phase is own.Phase.RUNNING:
                self.owned[key] = replace(o, lease=lease)  # hand-off request fields
        for lease in snap.leases:
            if lease.owner == self.id and lease.key not in self.owned and not lease.ended:
                log_event(logger, "lease_received", worker=self.id, lease=lease.key, epoch=lease.epoch)
                actions += self._pass_on(lease) if self.shutting_down else self._own(lease)
        if self.shutting_down:
            return actions
        return actions + [Forget(w) for w in self.fleet.to_forget(self._now)]

    def _pass_on(self, lease: Lease) -> list[Action]:
        """Given a lease while shutting down (the giver had not seen us draining yet): hand it on unread."""
        to = self.fleet.hand_to((lease.key,), self._now, self._wall_ms)[lease.key]
        self.owned[lease.key] = own.passing_on(lease, to)
        return []

    def _own(self, lease: Lease) -> list[Action]:
        self.owned[lease.key] = Ownership(lease)
        return [Start(lease), Metric("LeasesTaken", 1, lease.stream, lease.shard_id)]

    def _execute(self, p: Plan) -> list[Action]:
        actions: list[Action] = []
        for lease, to in p.give:
            if (o := self.owned.get(lease.key)) is not None:
                log_event(logger, "handoff_started", worker=self.id, lease=lease.key, to=to)
                actions += self._apply(lease.key, own.give(o, to, self._now))
        actions += [LeaseWrite(WriteKind.DECLINE, lease) for lease in p.decline]
        self._avoid = {k: t for k, t in self._avoid.items() if t > self._now}
        actions += [LeaseWrite(WriteKind.TAKE, lease) for lease in p.take if lease.key not in self._avoid]
        for lease, obs in p.steal:
            log_event(logger, "lease_expired", logging.WARNING, lease=lease.key, dead_owner=obs.worker_id)
            actions.append(LeaseWrite(WriteKind.TAKE, lease, dead_owner=obs))
        actions += [LeaseWrite(WriteKind.REQUEST, lease) for lease in p.request]
        for lease in p.stalled:
            if lease.key not in self._stall_reported:
                self._stall_reported.add(lease.key)
                log_event(logger, "handoff_stalled", logging.WARNING, lease=lease.key, owner=lease.owner)
                actions.append(Metric("HandoffsStalled", 1, lease.stream, lease.shard_id))
        self._stall_reported &= {x.key for x in self.fleet.snapshot.leases if x.handoff_to == self.id}
        return actions

    # -- results ----------------------------------------------------------------------------------
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
            self._avoid[ev.key] = self._now + self._lc.give_up_seconds
            log_event(logger, "shard_given_up", logging.WARNING, lease=ev.key, why=ev.detail)
        successor = None
        if ev.outcome in own.HANDED_ON:
            successor = self.fleet.hand_to((ev.key,), self._now, self._wall_ms)[ev.key]
        return self._apply(ev.key, own.finished(o, ev, successor))

    def _written(self, ev: ActionResult) -> list[Action]:
        o = self.owned.get(ev.lease.key)
        if o is not None and ev.lease.epoch == o.lease.epoch and ev.kind not in _NOT_OWNED:
            actions = self._apply(o.key, own.written(o, ev, self._now, backoff))
            if ev.kind is WriteKind.TRANSFER and ev.result is Result.OK and o.stop_asked_at is not None:
                ms = (self._now - o.stop_asked_at) * 1000
                actions.append(Metric("HandoffLatencyMs", ms, o.lease.stream, o.lease.shard_id))
            return actions
        if ev.result is not Result.OK:  # read the table again: soon after a conflict, later after a failure
            self._next_scan = min(self._next_scan, self._now + (0.0 if ev.result is Result.CONFLICT else 0.5))
            return []
        if ev.kind is WriteKind.TAKE and ev.new is not None:
            log_event(logger, "lease_taken", worker=self.id, lease=ev.new.key, epoch=ev.new.epoch)
            # A take that lands after our shutdown began is ours all the same: hand it on, never start it.
            return self._pass_on(ev.new) if self.shutting_down else self._own(ev.new)
        if ev.kind is WriteKind.REQUEST:
            return [Metric("HandoffsRequested", 1, ev.lease.stream, ev.lease.shard_id)]
        return []

    # -- shutdown ---------------------------------------------------------------------------------
    def _start_shutdown(self) -> list[Action]:
        """Stop taking, drain every shard, hand each lease to the least-loaded live worker (or release
        it), deregister — all inside the shutdown deadline."""
        self.shutting_down = True
        self._next_scan = float("inf")  # no more planning; a read only when the inbox says something came
        self.membership.draining = True
        self.membership.heartbeat_now(self._now)  # tells the fleet we are draining: nobody hands us anything
        self._deadline = self._now + self._cfg.shutdown.deadline
        log_event(logger, "shutdown_started", worker=self.id, leases=sorted(self.owned))
        actions: list[Action] = []
        for key, to in self.fleet.hand_to(tuple(self.owned), self._now, self._wall_ms).items():
            actions += self._apply(key, own.give(self.owned[key], to, self._now))
        return actions

    def _finish_shutdown(self) -> list[Action]:
        actions: list[Action] = []
        for key, o in sorted(self.owned.items()):
            if o.consuming:  # missed the deadline: leave the lease to expire, never to two owners
                actions.append(Stop(key, ShutdownReason.LEASE_LOST))
        log_event(logger, "shutdown_complete", worker=self.id, left_to_expire=sorted(self.owned))
        self.owned.clear()
        self.done = True
        return [*actions, Deregister()]
