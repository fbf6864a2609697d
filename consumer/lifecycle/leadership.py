"""Who plans for the fleet: this worker's view of the leadership item, and its claim when the leader is gone.

Leadership is a lease like any other: the item ``leader`` names an owner and an epoch, and the owner's worker
heartbeat keeps it. A worker that is not leading watches the leader's worker item (eventually consistent,
every ``leader_check_interval``) and claims the item once that heartbeat has not moved for a whole lease
duration on its own monotonic clock (or the item is unowned, or the leader's worker item has been gone that
long). Once the heartbeat has stood still for a check, the next check is due the moment that lease runs out,
so a dead leader is replaced about a lease plus one check interval after its last heartbeat. The claim is
conditional on the item as read and fences the dead leader's worker item, so two claims never both win and the
new leader may reassign the dead leader's leases at once.

A second leader, for a while, costs moves but never safety: every write a leader makes is conditional on the
lease as it read it, exactly like the owner's own writes.

Pure: ``now`` comes in; the coordinator turns the returned actions into I/O and feeds back the results.
"""

from __future__ import annotations

import enum
import hashlib
import logging

from consumer.config import LeaseConfig
from consumer.leases.model import Leader
from consumer.leases.repository import OwnerObservation
from consumer.lifecycle.messages import (
    Action,
    ClaimLeadership,
    LeaderRead,
    LeadershipResult,
    LeaderWatched,
    ReadLeader,
    ResignLeadership,
    Result,
    WatchLeader,
)
from consumer.lifecycle.retry import write_backoff
from consumer.logs import log_event

__all__ = ["Leadership", "Role"]

logger = logging.getLogger(__name__)

_REREAD_EVERY = 10  # checks: even with a leader in sight, read the item itself now and then


class Role(enum.Enum):
    SEEKING = "seeking"  # we do not know who leads: read the item
    WATCHING = "watching"  # another worker leads: watch its heartbeat
    CLAIMING = "claiming"  # a claim is in flight
    LEADING = "leading"
    RETIRED = "retired"  # shutting down: never claim again


class Leadership:
    def __init__(self, me: str, config: LeaseConfig, now: float) -> None:
        self.me = me
        self._cfg = config
        self.role = Role.SEEKING
        self.item: Leader | None = None  # the leadership item as last read or written
        self.dead: OwnerObservation | None = None  # the leader we replaced, fenced by our claim
        self._heartbeat: int | None = None  # the watched leader's heartbeat, first seen at ``_since``
        self._incarnation = ""  # the incarnation that heartbeat belongs to
        self._silence = config.lease_duration  # how long it must stand still: ours, or the leader's if longer
        self._since = now
        self._checks = 0
        self._claim_failures = 0  # claims in a row whose write failed (not lost to another claim)
        # Workers started together spread their first reads over one interval.
        spread = int(hashlib.blake2b(me.encode(), digest_size=2).hexdigest(), 16) / 65536
        self._next = now + spread * config.leader_check_interval

    @property
    def leading(self) -> bool:
        return self.role is Role.LEADING

    @property
    def leader_id(self) -> str | None:
        return self.item.owner if self.item is not None else None

    def next_due(self) -> float:
        return self._next if self.role in (Role.SEEKING, Role.WATCHING) else float("inf")

    def due(self, now: float) -> list[Action]:
        if now < self._next or self.role not in (Role.SEEKING, Role.WATCHING):
            return []
        self._next = now + self._cfg.leader_check_interval
        self._checks += 1
        if self.role is Role.SEEKING or self._checks % _REREAD_EVERY == 0 or self.leader_id is None:
            return [ReadLeader()]
        return [WatchLeader(self.leader_id)]

    def on_read(self, ev: LeaderRead, now: float) -> list[Action]:
        if ev.error or self.role not in (Role.SEEKING, Role.WATCHING):
            return []
        item = ev.leader
        if item is None or item.owner is None or item.owner == self.me:
            # Naming us (read again after a fence, or a restart under the same id): the read is eventually
            # consistent and may predate another worker's claim, so lead again only through a claim
            # conditional on the item as read (it fails, and we read again, if the item moved on).
            return self._claim(item, None)
        if self.item != item:
            self._heartbeat, self._since = None, now
        self.item, self.role = item, Role.WATCHING
        return [WatchLeader(item.owner)]

    def on_watched(self, ev: LeaderWatched, now: float) -> list[Action]:
        if ev.error or self.role is not Role.WATCHING or ev.worker_id != self.leader_id:
            return []
        beat = None if ev.worker is None else ev.worker.heartbeat
        incarnation = "" if ev.worker is None else ev.worker.incarnation
        if beat is None and self._heartbeat is not None:
            # Its item just went: most likely it resigned and deregistered. Read the leadership item now
            # (unowned: claim at once); if it still names that worker, its absence is timed from here.
            self._heartbeat, self._since = None, now
            self.role, self._next = Role.SEEKING, now
            return []
        if beat is not None and (
            self._heartbeat is None or incarnation != self._incarnation or beat > self._heartbeat
        ):
            # Moved (a stale, lower read of the same incarnation never counts as a move; a new incarnation
            # does: the leader registered again).
            self._heartbeat, self._incarnation, self._since = beat, incarnation, now
        if ev.worker is not None:  # a leader started with a longer lease beats less often: wait for its own
            self._silence = ev.worker.silence_allowed(self._cfg.lease_duration)
        expires = self._since + self._silence
        if now < expires:
            # Check again the moment the lease runs out rather than at the next periodic check: otherwise a
            # dead leader is replaced up to a whole check interval late.
            self._next = min(self._next, expires)
            return []
        return self._claim(self.item, OwnerObservation(ev.worker_id, self._heartbeat, self._incarnation))

    def _claim(self, seen: Leader | None, dead: OwnerObservation | None) -> list[Action]:
        self.role = Role.CLAIMING
        return [ClaimLeadership(seen, dead)]

    def on_claimed(self, ev: LeadershipResult, now: float) -> bool:
        """True when we now lead."""
        if self.role is not Role.CLAIMING:
            return False
        if ev.result is Result.OK and ev.leader is not None:
            self.item, self.dead, self.role = ev.leader, ev.claim.dead, Role.LEADING
            self._claim_failures = 0
            log_event(logger, "leadership_claimed", worker=self.me, epoch=ev.leader.epoch, replaced=_who(ev))
            return True
        self.role = Role.SEEKING
        if ev.result is Result.CONFLICT:  # somebody else won, or the item moved on: read it again at once
            self._claim_failures = 0
            self._next = now
            log_event(logger, "leadership_claim_lost", logging.INFO, worker=self.me, error=ev.error)
            return False
        # The write failed (throttled, DynamoDB unreachable): a read at once would claim again at once, so
        # back off as any failed lease-table write does (capped at 2 s, jittered).
        self._claim_failures += 1
        pause = write_backoff(self._claim_failures)
        self._next = now + pause
        log_event(
            logger,
            "leadership_claim_lost",
            logging.INFO,
            worker=self.me,
            error=ev.error,
            failures=self._claim_failures,
            retry_in_s=round(pause, 2),
        )
        return False

    def fenced(self, now: float) -> None:
        """Our generation moved: we may have been replaced. Read the item again before leading on."""
        if self.role is Role.LEADING:
            log_event(logger, "leadership_in_doubt", logging.WARNING, worker=self.me)
        if self.role is not Role.RETIRED:
            self.role, self._next = Role.SEEKING, now

    def leaving(self) -> None:
        """Shutting down: claim nothing from now on, whatever a read already under way says. A claim already
        in flight is still heard, so that a won claim is led until the end and then resigned."""
        if self.role in (Role.SEEKING, Role.WATCHING):
            self.role = Role.RETIRED

    def retire(self) -> list[Action]:
        """Shutting down: never claim again; give the item up if we hold it."""
        was, self.role = self.role, Role.RETIRED
        if was is Role.LEADING and self.item is not None:  # logged once written (effects.py)
            return [ResignLeadership(self.item)]
        return []


def _who(ev: LeadershipResult) -> str | None:
    return ev.claim.dead.worker_id if ev.claim.dead is not None else None
