"""The worker's decisions as a pure step: ``step(now, events) -> actions``. No I/O, no threads.

Every worker is a member: it heartbeats, polls its own item (its inbox), reads its own leases when the inbox
says something changed, starts the leases given to it, hands a lease on when the leader asks, and drains at
shutdown. One worker at a time also leads (``Leadership``): it reads the whole table and plans for the fleet
(``LeaderDuties``). So the table is read in full once per scan interval, not once per worker, and a member's
reads cost the same whatever the size of the fleet. ``next_due`` says when to step again if nothing happens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import assert_never

from consumer.config import WorkerConfig
from consumer.leases.fleet_plan import FleetPlan
from consumer.leases.model import Lease
from consumer.leases.repository import TableSnapshot
from consumer.lifecycle import ownership as own
from consumer.lifecycle.final_read import FinalRead
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
    Outcome,
    OwnRead,
    ReadInbox,
    ReadOwn,
    Reconciled,
    Result,
    ShardFinished,
    ShutdownRequested,
    TableRead,
    Wake,
    WriteKind,
)
from consumer.lifecycle.ownership import Ownership
from consumer.lifecycle.retry import write_backoff
from consumer.logs import Repeated, log_event

__all__ = ["Coordinator"]

logger = logging.getLogger(__name__)

_LEADERS_WRITES = frozenset({WriteKind.ASSIGN, WriteKind.REQUEST, WriteKind.DECLINE})
_OWN_READ_RETRY = 0.5


class Coordinator:
    """One worker's decisions: membership, leadership and the leases it holds, stepped on events."""

    def __init__(self, config: WorkerConfig, now: float) -> None:
        self.id = config.worker_id
        self._cfg = config
        self._lc = config.lease
        self.membership = Membership(self.id, config.lease, now)
        self.leadership = Leadership(self.id, config.lease, now)
        self._streams = frozenset(s.name for s in config.streams)
        self.duties = LeaderDuties(self.id, self._streams, config.lease)
        self.owned: dict[str, Ownership] = {}
        # Told at a bounded rate while DynamoDB is down.
        self._scan_failures = Repeated(logger, "scan_failed", "scan_recovered")
        self._own_read_failures = Repeated(logger, "own_read_failed", "own_read_recovered")
        self._read_own_at = float("inf")  # when to read our leases (and those given to us)
        self._own_read_out = False  # a ReadOwn awaits its answer
        self._was_fenced = False
        self._wake_leader: str | None = None
        self.shutting_down = False
        self._deadline = self._release_at = float("inf")
        self._final = FinalRead()  # a shutdown ends once nothing can have been handed to us unseen
        self.done = False
        self._now = now
        # Called with ``now`` at the start of every step: the liveness hook (consumer.health.Heartbeat). The
        # step itself stays pure; whoever drives it decides what a step's pulse does.
        self.on_step: Callable[[float], None] | None = None

    # -- the step ---------------------------------------------------------------------------------
    def step(self, now: float, events: Sequence[Event]) -> list[Action]:
        """Take in ``events`` at monotonic time ``now`` and return the actions to carry out, in order. No
        decision reads a wall clock: ours or, through the table's stamps, another worker's. Once ``done``
        (the shell has returned), it hears nothing more."""
        if self.on_step is not None:
            self.on_step(now)
        if self.done:
            return []
        self._now = now
        actions: list[Action] = []
        for ev in events:
            actions += self._handle(ev)
            self._fenced()
        if self.done:
            return actions
        # The shell runs actions in this order, one at a time: what a shard waits for comes first (a
        # hand-off's stop, a transfer, the read that starts a lease given to us), then membership, then the
        # leader's work.
        actions += self._due_ownerships(now)
        if now >= self._read_own_at:
            self._read_own_at = float("inf")  # until its result
            self._own_read_out = True
            actions.append(ReadOwn(tuple(sorted({*self.owned, *self.membership.given}))))
        gone = self.duties.fleet.gone if self.duties.active else frozenset()
        actions += self.membership.due(now, tuple(self.owned), self._busy(), gone)
        if not self.shutting_down:
            actions += self.leadership.due(now)
        ending = self._shutdown_due(now) if self.shutting_down else []
        # After the shutdown's own work: a shutdown that ends here ends the leader's duties (no last read of
        # the whole table before the exit).
        return actions + self.duties.due(now) + ending

    def _due_ownerships(self, now: float) -> list[Action]:
        """``Due`` to every ownership whose time has come; twice, as a halted lease's hand-off that comes
        due is a transfer due at once."""
        actions: list[Action] = []
        for _ in range(2):
            for key, o in list(self.owned.items()):
                if now >= o.due_at:
                    actions += self._apply(key, own.Due())
        return actions

    def _handle(self, ev: Event) -> list[Action]:  # noqa: C901, PLR0911, PLR0912 - one case per event type
        """Route one event to the part of the coordinator it is for (mypy checks that every event has one)."""
        match ev:
            case ShutdownRequested():
                return [] if self.shutting_down else self._start_shutdown()
            case HeartbeatResult():
                if self.shutting_down:
                    self._final.heard(ev)
                return self.membership.on_heartbeat(ev, self._now)
            case InboxRead():
                return self._on_inbox(ev)
            case OwnRead():
                return self._on_own(ev.asked, ev.leases, ev.error)
            case Reconciled():
                return self._on_reconciled(ev)
            case LeaderRead():
                return self.leadership.on_read(ev, self._now)
            case LeaderWatched():
                return self.leadership.on_watched(ev, self._now)
            case LeadershipResult():
                return self._on_claimed(ev)
            case TableRead():
                return self._on_table(ev)
            case Discovered():
                return self.duties.on_discovered(ev, self._now)
            case ShardFinished():
                return self._finished(ev)
            case ActionResult():
                return self._written(ev)
            case _:
                assert_never(ev)

    def next_due(self) -> float:
        """When to step again if no event comes first."""
        due = [
            self.membership.next_due(),
            self.leadership.next_due() if not self.shutting_down else float("inf"),
            self.duties.next_due(),
            self._read_own_at,
            *(o.due_at for o in self.owned.values()),
        ]
        if self.shutting_down:
            due += [self._deadline, self._release_at]
        return min(due)

    def _busy(self) -> bool:
        """Poll our item fast: we shut down, or a lease of ours is on the move. A leader whose fleet is at
        rest polls at the quiet cadence like everyone (what it would hear, a worker draining, its scan sees
        too); while its plan moves leases it polls fast (``_on_table``)."""
        moving = any(not o.at_rest for o in self.owned.values())
        return self.shutting_down or moving

    # -- membership -------------------------------------------------------------------------------
    def _fenced(self) -> None:
        """Somebody took a lease of ours, or leadership, after we were silent too long: lead no more until
        the leadership item says we still do."""
        if self.membership.fenced and not self._was_fenced:
            self.leadership.fenced(self._now)
            self.duties.end()
        self._was_fenced = self.membership.fenced

    def _on_inbox(self, ev: InboxRead) -> list[Action]:
        if ev.final:
            self._final.answered(ev)
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
        self._own_read_out = False
        if leases is None:
            self._own_read_failures.failed(self._now, error=error)
            self._read_own_at = min(self._read_own_at, self._now + _OWN_READ_RETRY)
            return []
        self._own_read_failures.passed(self._now)
        current = {lease.key: lease for lease in leases}
        actions: list[Action] = []
        for key in sorted(set(asked) & set(self.owned)):
            actions += self._apply(key, own.Seen(current.get(key)))
        for key in sorted(set(asked) - set(self.owned)):
            lease = current.get(key)
            if lease is not None and lease.owner == self.id and not lease.ended:
                log_event(logger, "lease_received", worker=self.id, lease=key, epoch=lease.epoch)
                actions += self._receive(lease)
                actions += self._apply(key, own.Seen(lease))  # it may arrive asked for already
        read_given = frozenset(asked) & self.membership.given
        return actions + ([AckGiven(read_given)] if read_given else [])

    # -- leadership -------------------------------------------------------------------------------
    def _on_claimed(self, ev: LeadershipResult) -> list[Action]:
        if self.leadership.on_claimed(ev, self._now):
            self.duties.begin(self._now, ev.claim.dead)
        return []

    def _on_table(self, ev: TableRead) -> list[Action]:
        if ev.snapshot is None:
            self._scan_failures.failed(self._now, error=ev.error)
            return []
        self._scan_failures.passed(self._now)
        if not self.duties.active:
            return []
        p = self.duties.on_table(ev.snapshot, self._now, self.shutting_down)
        if not self.membership.valid(self._now):  # our heartbeat is not current: plan nothing
            return []
        return self._planned(p, ev.snapshot)

    def _planned(self, p: FleetPlan, snapshot: TableSnapshot) -> list[Action]:
        """The writes of the leader's plan ``p`` (made from ``snapshot``; our heartbeat is current) and the
        release of our stranded leases."""
        if p.truncated or p.moves_for(self.id, snapshot):
            self.membership.expect(self._now)  # poll fast for a while: we hear of it through our item
        actions = self.duties.write(p, self._now)
        for lease in p.stranded:  # our own, with nobody to take them: release
            actions += self._apply(lease.key, own.Strand())
        return actions

    # -- our leases -------------------------------------------------------------------------------
    def _successor(self, key: str) -> str | None:
        """Whom to hand a lease on to without being asked: the leader knows; anyone else releases it and
        the leader reassigns it."""
        if not self.duties.active:
            return None
        return self.duties.fleet.hand_to((key,), self._now)[key]

    def _receive(self, lease: Lease) -> list[Action]:
        """A lease now ours: start it; while shutting down (the giver had not seen us draining yet), or if we
        do not consume its stream, hand it on unread."""
        if self.shutting_down:
            new, actions, *_ = own.passing_on(lease, self._successor(lease.key))
        elif lease.stream not in self._streams:  # a worker of another version handed it to us
            log_event(
                logger,
                "lease_not_consumed",
                logging.WARNING,
                worker=self.id,
                lease=lease.key,
                stream=lease.stream,
                why="this worker does not consume the stream (CONSUMER_STREAMS differs across the fleet): "
                "handed on unread",
            )
            new, actions, *_ = own.not_ours_to_read(lease, self._successor(lease.key))
        else:
            new, actions, *_ = own.begin(lease)
        assert new is not None
        self.owned[lease.key] = new
        return actions

    def _apply(self, key: str, ev: own.OwnEvent) -> list[Action]:
        """Step the ownership of ``key`` (if we hold it) on ``ev``: the one way an ownership changes."""
        if (o := self.owned.get(key)) is None:
            return []
        ctx = own.Context(self._now, self.id, self._lc.idle_poll, write_backoff)
        new, actions, *_ = own.step(o, ev, ctx)
        if new is None:
            del self.owned[key]
        else:
            self.owned[key] = new
        return actions

    def _finished(self, ev: ShardFinished) -> list[Action]:
        if ev.key not in self.owned:
            return []
        log_event(logger, "shard_finished", worker=self.id, lease=ev.key, outcome=ev.outcome.value)
        if ev.outcome in (Outcome.GAVE_UP, Outcome.FAILED):
            log_event(logger, "shard_given_up", logging.WARNING, lease=ev.key, why=ev.detail)
        if ev.outcome is Outcome.GAVE_UP:  # as a leader, we are not handed leases back for a while either
            self.duties.fleet.gave_up(self.id, self._now)
        successor = self._successor(ev.key) if ev.outcome in own.HANDED_ON else None
        return self._apply(ev.key, own.Finished(ev, successor))

    def _written(self, ev: ActionResult) -> list[Action]:
        if ev.kind in _LEADERS_WRITES:
            actions = self.duties.on_written(ev, self._now)
            mine = ev.kind is WriteKind.ASSIGN and ev.to == self.id and ev.lease.key not in self.owned
            if mine and ev.new is not None:  # we planned it for ourselves
                actions += self._receive(ev.new)
            elif mine and ev.result is Result.FAILED:  # it may have landed: our item will say so
                self.membership.expect(self._now)
            return actions
        return self._apply(ev.lease.key, ev)

    # -- shutdown ---------------------------------------------------------------------------------
    def _start_shutdown(self) -> list[Action]:
        """Stop planning for ourselves, tell the fleet we are draining and wait for the leader to ask for each
        lease (it picks the least-loaded live workers). Whatever nobody asks for in time is released."""
        self.shutting_down = True
        self.membership.drain(self._now)  # the next heartbeat tells the fleet: nobody hands us anything
        self.leadership.leaving()  # a leader read answered after this claims nothing
        self._deadline = self._now + self._cfg.shutdown.deadline
        self._final.begin(self._now)
        self._release_at = self._now + min(self._lc.lease_duration, self._cfg.shutdown.deadline) / 2
        log_event(logger, "shutdown_started", worker=self.id, leases=sorted(self.owned))
        leader = self.leadership.leader_id
        if self.duties.active:
            valid = self.membership.valid(self._now)  # else plan nothing now: read and plan later
            if valid and (p := self.duties.plan_leaving(self._now, frozenset(self.owned))) is not None:
                return self._planned(p, self.duties.fleet.snapshot)
            self.duties.scan_soon(self._now)
        elif leader is not None and leader != self.id:
            self._wake_leader = leader  # after the draining heartbeat of this same step
        return []

    def _shutdown_due(self, now: float) -> list[Action]:
        actions: list[Action] = [Wake(self._wake_leader)] if self._wake_leader else []
        self._wake_leader = None
        if now >= self._release_at:  # no leader asked in time: let the leader reassign them later
            self._release_at = float("inf")
            for key in sorted(self.owned):
                if self.owned[key].at_rest:
                    log_event(logger, "shutdown_release", logging.WARNING, worker=self.id, lease=key)
                actions += self._apply(key, own.Unasked())
        if now >= self._deadline:
            return actions + self._finish_shutdown()
        settled = not self.owned and not self._own_read_out and self._read_own_at == float("inf")
        read_now, may_end = self._final.due(settled)
        if read_now:
            actions.append(ReadInbox(final=True))
        if may_end:
            actions += self._finish_shutdown()
        return actions

    def _finish_shutdown(self) -> list[Action]:
        log_event(logger, "shutdown_complete", worker=self.id, left_to_expire=sorted(self.owned))
        actions: list[Action] = []
        for key in sorted(self.owned):  # a consumer still running is stopped as lost: never two owners
            actions += self._apply(key, own.Deadline())
        self.done = True
        self.duties.end()
        return [*actions, *self.leadership.retire(), Deregister()]
