"""The worker's decisions as a pure step: ``step(now, wall_ms, events) -> actions``. No I/O, no threads.

It holds membership, liveness and the ownerships; asks the pure planner what to take, give and request;
and turns every result the shell feeds back into the next actions. ``next_due`` says when it wants to be
stepped again even if nothing happens.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import replace

from consumer.config import WorkerConfig
from consumer.leases.liveness import LivenessTracker
from consumer.leases.model import Lease
from consumer.leases.planner import Plan, PlanInput, plan, plan_shutdown
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.lifecycle import ownership as own
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
    WriteKind,
)
from consumer.lifecycle.ownership import Ownership
from consumer.lifecycle.processor import ShutdownReason
from consumer.logs import log_event

__all__ = ["Coordinator"]

logger = logging.getLogger(__name__)


def backoff(failures: int) -> float:
    """Capped exponential backoff with jitter for lease-table writes that failed transiently."""
    return min(2.0, 0.1 * 2.0 ** (failures - 1)) * (0.5 + random.random() / 2)


class Coordinator:
    def __init__(self, config: WorkerConfig, now: float) -> None:
        self.id = config.worker_id
        self._cfg = config
        self._lc = config.lease
        self._streams = frozenset(s.name for s in config.streams)
        self.membership = Membership(self.id, config.lease, now)
        self._liveness = LivenessTracker(config.lease.lease_duration)
        self.owned: dict[str, Ownership] = {}
        self.snapshot = TableSnapshot((), ())
        self._next_scan = now
        self._next_discovery = now + config.lease.discovery_interval
        self._stall_reported: set[str] = set()
        self._avoid: dict[str, float] = {}  # leases we gave up on: others get the first chance to retry
        self._forgetting: set[tuple[str, int]] = set()
        self.shutting_down = False
        self._deadline = float("inf")
        self.done = False
        self._now = now
        self._wall_ms = 0

    # -- the step ---------------------------------------------------------------------------------
    def step(self, now: float, wall_ms: int, events: Sequence[Event]) -> list[Action]:
        self._now, self._wall_ms = now, wall_ms
        actions: list[Action] = []
        for ev in events:
            actions += self._on(ev, now, wall_ms)
        if self.done:
            return actions
        actions += self.membership.due(now, len(self.owned))
        if not self.shutting_down and now >= self._next_scan:
            self._next_scan = now + self._lc.scan_interval
            actions.append(ReadTable())
        if not self.shutting_down and now >= self._next_discovery:
            self._next_discovery = now + self._lc.discovery_interval
            actions.append(Discover(self.snapshot.leases))
        for o in list(self.owned.values()):
            if (write := o.write()) is not None and now >= o.retry_at:
                self.owned[o.key] = replace(o, retry_at=float("inf"))  # in flight until its result
                actions.append(write)
        if self.shutting_down and (not self.owned or now >= self._deadline):
            actions += self._finish_shutdown()
        return actions

    def next_due(self) -> float:
        due = [self.membership.next_due(), *(o.retry_at for o in self.owned.values() if o.write())]
        if self.shutting_down:
            due.append(self._deadline)
        else:
            due += [self._next_scan, self._next_discovery]
        return min(due)

    def _on(self, ev: Event, now: float, wall_ms: int) -> list[Action]:
        match ev:
            case HeartbeatResult():
                return self.membership.on_heartbeat(ev, now)
            case InboxRead():
                signals = self.membership.on_inbox(ev, now)
                if signals.scan_now:
                    self._next_scan = now
                if signals.drain_requested and not self.shutting_down:
                    log_event(logger, "drain_requested", worker=self.id)
                    return self._start_shutdown(now)
                return []
            case Reconciled():
                if self.membership.on_reconciled(ev, now) and ev.snapshot is not None:
                    return self._observe(ev.snapshot, now, reconciling=True)
                return []
            case TableRead():
                if ev.snapshot is None:
                    log_event(logger, "scan_failed", logging.WARNING, error=ev.error)
                    return []
                return self._observe(ev.snapshot, now) + self._plan(now, wall_ms)
            case Discovered():
                if ev.changed:
                    self._next_scan = now
                return []
            case ShardFinished():
                return self._finished(ev, now)
            case ActionResult():
                return self._written(ev, now)
            case ShutdownRequested():
                return [] if self.shutting_down else self._start_shutdown(now)
        return []

    # -- the table --------------------------------------------------------------------------------
    def _observe(self, snap: TableSnapshot, now: float, *, reconciling: bool = False) -> list[Action]:
        """Take in a fresh read: drop ownerships that moved, start leases given to us."""
        snap = TableSnapshot(tuple(x for x in snap.leases if x.stream in self._streams), snap.workers)
        self.snapshot = snap
        self._liveness.observe(snap.workers, snap.leases, now)
        actions: list[Action] = []
        current = {lease.key: lease for lease in snap.leases}
        for key, o in list(self.owned.items()):
            lease = current.get(key)
            if lease is None or lease.owner != self.id or lease.epoch != o.lease.epoch:
                why = "fenced" if reconciling else "moved"
                log_event(logger, "lease_lost", logging.WARNING, worker=self.id, lease=key, why=why)
                actions += self._apply(key, own.lose(o))
            elif o.phase is own.Phase.RUNNING:
                self.owned[key] = replace(o, lease=lease)  # hand-off request fields
        if self.shutting_down:
            return actions
        for lease in snap.leases:
            if lease.owner == self.id and lease.key not in self.owned and not lease.ended:
                log_event(logger, "lease_received", worker=self.id, lease=lease.key, epoch=lease.epoch)
                actions += self._own(lease)
        return actions + self._forget(now)

    def _own(self, lease: Lease) -> list[Action]:
        self.owned[lease.key] = Ownership(lease)
        return [Start(lease), Metric("LeasesTaken", 1, lease.stream, lease.shard_id)]

    def _forget(self, now: float) -> list[Action]:
        actions: list[Action] = []
        for w in self.snapshot.workers:
            mark = (w.worker_id, w.heartbeat)
            silent = self._liveness.silent_for(w.worker_id, now) >= self._lc.forget_workers_seconds
            if w.worker_id != self.id and silent and mark not in self._forgetting:
                self._forgetting.add(mark)
                log_event(logger, "worker_forgotten", worker=self.id, dead=w.worker_id)
                actions.append(Forget(w))
        return actions

    def _live(self) -> frozenset[str]:
        """Workers to share leases with: heartbeat seen moving, and not long silent by its own wall time
        (a hint that only spares a new worker from waiting out crashed workers' items; takes of owned
        leases still wait a full lease duration on our monotonic clock)."""
        stale_ms = self._lc.lease_duration * 1000
        return frozenset(
            w.worker_id
            for w in self.snapshot.workers
            if self._liveness.is_alive(w.worker_id, self._now)
            and self._wall_ms - max(w.heartbeat_ms, w.started_ms) < stale_ms
        ) | {self.id}

    def _plan(self, now: float, wall_ms: int) -> list[Action]:
        if self.shutting_down or not self.membership.valid(now):
            return []
        live = self._live()
        dead: dict[str, OwnerObservation] = {}
        for lease in self.snapshot.leases:
            if lease.owner is not None and lease.owner not in live:
                obs = self._liveness.dead_owner(lease.owner, now)
                if obs is not None:
                    dead[lease.owner] = obs
        result = plan(
            PlanInput(
                me=self.id,
                leases=self.snapshot.leases,
                live_workers=live,
                draining_workers=frozenset(w.worker_id for w in self.snapshot.workers if w.draining),
                dead_owners=dead,
                now_ms=wall_ms,
                handoff_stall_ms=int(self._lc.handoff_stall_after * 1000),
                max_leases=self._lc.max_leases_per_worker,
            )
        )
        return self._execute(result, now)

    def _execute(self, p: Plan, now: float) -> list[Action]:
        actions: list[Action] = []
        for lease, to in p.give:
            if (o := self.owned.get(lease.key)) is not None:
                log_event(logger, "handoff_started", worker=self.id, lease=lease.key, to=to)
                actions += self._apply(lease.key, own.give(o, to, now))
        actions += [LeaseWrite(WriteKind.DECLINE, lease) for lease in p.decline]
        self._avoid = {k: t for k, t in self._avoid.items() if t > now}
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
        self._stall_reported &= {x.key for x in self.snapshot.leases if x.handoff_to == self.id}
        return actions

    # -- results ----------------------------------------------------------------------------------
    def _apply(self, key: str, result: own.Step) -> list[Action]:
        new, actions = result
        if new is None:
            self.owned.pop(key, None)
        else:
            self.owned[key] = new
        return actions

    def _finished(self, ev: ShardFinished, now: float) -> list[Action]:
        o = self.owned.get(ev.key)
        if o is None:
            return []
        log_event(logger, "shard_finished", worker=self.id, lease=ev.key, outcome=ev.outcome.value)
        if ev.outcome in (Outcome.GAVE_UP, Outcome.FAILED):
            self._avoid[ev.key] = now + self._lc.give_up_seconds
            log_event(logger, "shard_given_up", logging.WARNING, lease=ev.key, why=ev.detail)
        return self._apply(ev.key, own.finished(o, ev, self._successor(ev.key)))

    def _successor(self, key: str) -> str | None:
        """The least-loaded live worker other than us that is not draining (None: nobody)."""
        draining = {w.worker_id for w in self.snapshot.workers if w.draining}
        others = self._live() - draining - {self.id}
        return plan_shutdown(self.id, self.snapshot.leases, frozenset(others), (key,))[key]

    def _written(self, ev: ActionResult, now: float) -> list[Action]:
        o = self.owned.get(ev.lease.key)
        if o is not None and ev.lease.epoch == o.lease.epoch and ev.kind not in _NOT_OWNED:
            actions = self._apply(o.key, own.written(o, ev, now, backoff))
            if ev.kind is WriteKind.TRANSFER and ev.result is Result.OK and o.stop_asked_at is not None:
                actions.append(
                    Metric(
                        "HandoffLatencyMs", (now - o.stop_asked_at) * 1000, o.lease.stream, o.lease.shard_id
                    )
                )
            return actions
        if ev.result is not Result.OK:
            self._next_scan = min(self._next_scan, now + (0.0 if ev.result is Result.CONFLICT else 0.5))
            return []
        if ev.kind is WriteKind.TAKE and ev.new is not None and not self.shutting_down:
            log_event(logger, "lease_taken", worker=self.id, lease=ev.new.key, epoch=ev.new.epoch)
            return self._own(ev.new)
        if ev.kind is WriteKind.REQUEST:
            return [Metric("HandoffsRequested", 1, ev.lease.stream, ev.lease.shard_id)]
        return []

    # -- shutdown ---------------------------------------------------------------------------------
    def _start_shutdown(self, now: float) -> list[Action]:
        """Stop taking, drain every shard, hand each lease to the least-loaded live worker (or release
        it), deregister — all inside the shutdown deadline."""
        self.shutting_down = True
        self.membership.draining = True
        self.membership.heartbeat_now(now)  # tells the fleet we are draining: nobody hands us anything
        self._deadline = now + self._cfg.shutdown.deadline
        log_event(logger, "shutdown_started", worker=self.id, leases=sorted(self.owned))
        draining = {w.worker_id for w in self.snapshot.workers if w.draining}
        successors = frozenset(self._live() - draining - {self.id})
        chosen = plan_shutdown(self.id, self.snapshot.leases, successors, tuple(self.owned))
        actions: list[Action] = []
        for key, to in chosen.items():
            actions += self._apply(key, own.give(self.owned[key], to, now))
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


_NOT_OWNED = frozenset({WriteKind.TAKE, WriteKind.REQUEST, WriteKind.DECLINE})
