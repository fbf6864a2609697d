"""This worker's membership as state and actions, without I/O: heartbeats, the inbox, reconciliation.

The inbox is our own worker item, read eventually consistent: every ``idle_poll_interval`` when all is
quiet, every ``inbox_poll_interval`` for half a lease after its ``expect`` counter moved (the leader asked an
owner to hand us a lease) or the leader's plan moved leases, and while the coordinator is busy (shutting down,
a hand-off of ours under way).

The coordinator owns one; it never reads a clock (``now`` comes in) and never calls DynamoDB (it returns
``Heartbeat``, ``ReadInbox`` and ``Reconcile`` actions and hears their results as events).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from consumer.config import LeaseConfig
from consumer.lifecycle.messages import (
    Action,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    ReadInbox,
    Reconcile,
    Reconciled,
    Renew,
    Result,
)
from consumer.logs import Repeated, log_event

__all__ = ["Membership", "Signals"]

logger = logging.getLogger(__name__)

_RETRY = 0.5  # a failed heartbeat, inbox read or reconcile is sent again this soon (DynamoDB may be back)


@dataclass
class Signals:
    """What a membership event tells the coordinator beyond membership itself."""

    scan_now: bool = False  # the inbox moved (a leader: somebody joined or is leaving)
    read_own: bool = False  # read our leases and those given to us
    drain_requested: bool = False


class Membership:
    def __init__(self, worker_id: str, config: LeaseConfig, now: float) -> None:
        self.worker_id = worker_id
        self._cfg = config
        self.generation = 0
        self.draining = False
        self.valid_until = float("-inf")  # mirrors OwnValidity, which the shell extends on ``Renew``
        self._inbox = 0
        self._expect = 0
        self._fenced = False  # our generation moved: reconcile before anything else
        self._next_heartbeat = now
        self._next_inbox = now
        self._next_reconcile = now
        self._fast_until = float(
            "-inf"
        )  # a wake-up makes us poll fast (not the start: a fleet starts at once)
        self.given: frozenset[str] = frozenset()  # keys given to us, as our item last said
        self._gone: frozenset[str] = frozenset()  # the gone streams our last heartbeat carried
        # Told at a bounded rate while DynamoDB is down (retried every 0.5 s and every idle poll).
        self._heartbeat_failures = Repeated(logger, "heartbeat_failed", "heartbeat_recovered")
        self._inbox_failures = Repeated(logger, "inbox_poll_failed", "inbox_poll_recovered")

    @property
    def fenced(self) -> bool:
        """Our generation moved (a worker took a lease of ours, or leadership, after a long silence)."""
        return self._fenced

    def valid(self, now: float) -> bool:
        return now < self.valid_until

    def next_due(self) -> float:
        if self._fenced:
            return self._next_reconcile
        return min(self._next_heartbeat, self._next_inbox)

    def heartbeat_now(self, now: float) -> None:
        """Send a heartbeat at the next step."""
        self._next_heartbeat = now

    def drain(self, now: float) -> None:
        """Shutting down: every heartbeat from now on says so, the first at the next step."""
        self.draining = True
        self.heartbeat_now(now)

    def expect(self, now: float) -> None:
        """Poll fast for a while: something is on its way to us."""
        self._fast_until = max(self._fast_until, now + self._cfg.lease_duration / 2)
        self._next_inbox = min(self._next_inbox, now + self._cfg.inbox_poll_interval)

    def due(
        self, now: float, owned: tuple[str, ...], busy: bool, gone: frozenset[str] = frozenset()
    ) -> list[Action]:
        """What membership sends now: a heartbeat (publishing ``gone``, the streams our discovery found gone
        while we lead), a read of our item, or, once fenced, a reconcile."""
        if self._fenced:
            if now >= self._next_reconcile:
                self._next_reconcile = now + _RETRY
                return [Reconcile(tuple(sorted({*owned, *self.given})))]
            return []
        lease_count = len(owned)
        actions: list[Action] = []
        # A change of the gone streams goes out at once: `status` shows them from our item.
        if now >= self._next_heartbeat or gone != self._gone:
            self._next_heartbeat, self._gone = now + _RETRY, gone  # until its result says otherwise
            actions.append(Heartbeat(self.generation, lease_count, self.draining, gone))
        if now >= self._next_inbox:
            fast = busy or self.draining or now < self._fast_until
            self._next_inbox = now + (self._cfg.inbox_poll_interval if fast else self._cfg.idle_poll)
            actions.append(ReadInbox())
        return actions

    def on_heartbeat(self, ev: HeartbeatResult, now: float) -> list[Action]:
        if ev.result is Result.OK:
            self._heartbeat_failures.passed(now, worker=self.worker_id)
            self.valid_until = max(self.valid_until, ev.sent_at + self._cfg.owner_validity)
            self._next_heartbeat = ev.sent_at + self._cfg.heartbeat_every
            return [Renew(ev.sent_at)]
        if ev.fenced:
            self._fence(now)
            return []
        # Every 0.5 s while DynamoDB is down: the first at once, then a line per REPEAT_EVERY with the count.
        self._heartbeat_failures.failed(
            now, worker=self.worker_id, error=ev.error, validity_left_s=round(self.valid_until - now, 2)
        )
        self._next_heartbeat = now + _RETRY
        return []

    def _fence(self, now: float) -> None:
        self._fenced = True
        self._next_reconcile = now

    def on_inbox(self, ev: InboxRead, now: float) -> Signals:
        out = Signals()
        if ev.worker is None:
            if ev.error:  # a failing (e.g. throttled) read is not hammered: the next waits the quiet cadence
                self._inbox_failures.failed(now, error=ev.error)
                self._next_inbox = max(self._next_inbox, now + self._cfg.idle_poll)
            else:  # our item is gone (a live worker forgot us after a long silence): join again
                self._fence(now)
            return out
        self._inbox_failures.passed(now)
        if ev.worker.generation > self.generation:  # (an eventually consistent read may lag behind us)
            self._fence(now)
        if ev.worker.inbox > self._inbox:
            self._inbox = ev.worker.inbox
            out.scan_now = out.read_own = True
        if ev.worker.expect > self._expect:  # the leader asked an owner to hand us a lease
            self._expect = ev.worker.expect
            self.expect(now)
        self.given = ev.worker.given
        out.read_own |= bool(self.given)
        out.drain_requested = ev.worker.drain_requested
        return out

    def on_reconciled(self, ev: Reconciled, now: float) -> bool:
        """True when reconciled (the caller then drops the leases the snapshot shows moved)."""
        if ev.worker is None or ev.leases is None:
            log_event(logger, "reconcile_failed", logging.WARNING, worker=self.worker_id, error=ev.error)
            return False
        self._fenced = False
        self.generation = ev.worker.generation
        self._inbox = ev.worker.inbox
        self._expect = ev.worker.expect
        self.given = ev.worker.given
        self._next_heartbeat = now
        return True
