"""Lease validity without synchronized clocks: every duration here is measured on our own monotonic clock."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from consumer.clock import Clock
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import OwnerObservation

__all__ = ["LivenessTracker", "OwnValidity"]


class OwnValidity:
    """Until when this worker may act on its leases: the *send* time of its last good heartbeat plus
    ``lease_duration - safety_margin``.

    A taker waits a full ``lease_duration`` after it first *saw* that heartbeat's value, which is after it
    was written, which is after we sent it; so our window always closes first, also when we were paused
    (SIGSTOP) or could not reach DynamoDB. Shared between the coordinator (which extends it) and the shard
    threads (which read it), hence the lock.
    """

    def __init__(self, clock: Clock, window: float) -> None:
        self._clock = clock
        self._window = window
        self._until = float("-inf")
        self._lock = threading.Lock()
        self._lapses = 0

    def extend(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was acknowledged: the window runs to ``sent_at + window``."""
        with self._lock:
            if sent_at >= self._until:  # the window had closed before this heartbeat left: a gap
                self._lapses += 1
            self._until = max(self._until, sent_at + self._window)

    @property
    def lapses(self) -> int:
        """How many times the window has been opened after being closed (the first opening included): a
        change between two looks means ownership was not provable for a while in between."""
        with self._lock:
            return self._lapses

    def valid(self) -> bool:
        return self._clock.monotonic() < self._until

    def remaining(self) -> float:
        """Seconds until the window closes (negative once closed)."""
        return self._until - self._clock.monotonic()

    @property
    def window(self) -> float:
        """How long one good heartbeat keeps the window open, from its send time."""
        return self._window


@dataclass
class _Seen:
    heartbeat: int
    incarnation: str
    since: float  # monotonic time we first saw this (incarnation, heartbeat)
    duration: float  # how long its silence must last before it is dead: the longer of ours and its own


class LivenessTracker:
    """Tells which workers are alive from the heartbeat counters seen in successive scans.

    Pure bookkeeping: the caller passes its monotonic ``now``; nothing here reads a clock. A change of
    incarnation (the worker registered again) counts as a move, like a change of the counter. A worker that
    publishes a longer lease duration than ours (``WorkerItem.lease_duration_ms``: started with other
    settings) is judged by its own: it beats less often, and its window closes only after its own lease
    duration less its margin, so taking its leases after ours would make two owners.
    """

    def __init__(self, lease_duration: float) -> None:
        self._duration = lease_duration
        self._seen: dict[str, _Seen] = {}
        self._absent_since: dict[str, float] = {}

    def observe(self, workers: tuple[WorkerItem, ...], leases: tuple[Lease, ...], now: float) -> None:
        present = {w.worker_id for w in workers}
        for w in workers:
            seen = self._seen.get(w.worker_id)
            if seen is None or (seen.incarnation, seen.heartbeat) != (w.incarnation, w.heartbeat):
                duration = w.silence_allowed(self._duration)
                self._seen[w.worker_id] = _Seen(w.heartbeat, w.incarnation, now, duration)
        for gone in set(self._seen) - present:
            del self._seen[gone]
        owners = {lease.owner for lease in leases if lease.owner is not None and not lease.ended}
        for owner in owners - present:
            self._absent_since.setdefault(owner, now)
        for owner in set(self._absent_since) - (owners - present):
            del self._absent_since[owner]

    def silent_for(self, worker_id: str, now: float) -> float:
        """How long we have seen this worker's heartbeat not move (0 for a worker we never saw)."""
        seen = self._seen.get(worker_id)
        return 0.0 if seen is None else now - seen.since

    def is_alive(self, worker_id: str, now: float) -> bool:
        seen = self._seen.get(worker_id)
        return seen is not None and now - seen.since < seen.duration

    def silence_ends(self, worker_id: str) -> float:
        """When this worker becomes dead to us if nothing moves before: a lease duration after we saw its
        heartbeat (or its absence) begin; infinity for a worker we have no view of."""
        seen = self._seen.get(worker_id)
        if seen is not None:
            return seen.since + seen.duration
        since = self._absent_since.get(worker_id)
        return float("inf") if since is None else since + self._duration

    def dead_owner(self, worker_id: str, now: float) -> OwnerObservation | None:
        """An observation to fence a dead owner with, or ``None`` while it may still be alive."""
        seen = self._seen.get(worker_id)
        if seen is not None:
            if now - seen.since >= seen.duration:
                return OwnerObservation(worker_id, seen.heartbeat, seen.incarnation)
            return None
        since = self._absent_since.get(worker_id)
        if since is not None and now - since >= self._duration:
            return OwnerObservation(worker_id, None)
        return None
