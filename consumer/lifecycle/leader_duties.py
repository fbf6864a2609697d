"""What the worker that leads does for the fleet: read the whole table, plan, and write the plan.

Pure like the coordinator: it returns actions and hears their results. Only the leader reads the whole table
(eventually consistent; every ``scan_interval``, at once when its inbox moves or the last plan was cut short),
runs discovery (ListShards) and forgets dead worker items; the other workers read only their own items.
"""

from __future__ import annotations

import logging

from consumer.config import LeaseConfig
from consumer.leases.fleet_plan import FleetPlan
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.lifecycle.fleet_view import FleetView
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    Discover,
    Discovered,
    Forget,
    LeaseWrite,
    Metric,
    ReadTable,
    Result,
    WriteKind,
)
from consumer.logs import log_event

__all__ = ["LeaderDuties"]

logger = logging.getLogger(__name__)

_AFTER_FAILURE = 0.5  # a failed write: plan again this soon (after a conflict: at once)


class LeaderDuties:
    def __init__(self, me: str, streams: frozenset[str], config: LeaseConfig) -> None:
        self.me = me
        self._cfg = config
        self.fleet = FleetView(me, streams, config)
        self.active = False
        self._next_scan = float("inf")
        self._next_discovery = float("inf")
        self._discovering = False  # a discovery is under way (on the background lane)
        self._read_at: float | None = None  # when the table we hold was read, since we lead (None: not yet)
        self._stall_reported: set[str] = set()
        # A token bucket of moves: ``max_moves_per_second``, up to one second's worth saved up.
        self._tokens = float(config.max_moves_per_second)
        self._filled_at = float("-inf")

    def begin(self, now: float, replaced: OwnerObservation | None) -> None:
        """We lead from now on: read the table and run discovery at once."""
        self.active, self._read_at = True, None
        self._next_scan = self._next_discovery = now
        self.fleet.begin()
        if replaced is not None:
            self.fleet.known_dead(replaced)

    def end(self) -> None:
        self.active = False
        self._next_scan = self._next_discovery = float("inf")

    def scan_soon(self, now: float, delay: float = 0.0) -> None:
        if self.active:
            self._next_scan = min(self._next_scan, now + delay)

    def next_due(self) -> float:
        if not self.active:
            return float("inf")
        return min(self._next_scan, self._next_discovery if self._read_at is not None else float("inf"))

    def due(self, now: float) -> list[Action]:
        if not self.active:
            return []
        actions: list[Action] = []
        if now >= self._next_scan:
            self._next_scan = now + self._cfg.scan_interval
            actions.append(ReadTable())
        if self._read_at is not None and not self._discovering and now >= self._next_discovery:
            # The next one is counted from when this one ends (on_discovered): a slow ListShards is never
            # followed by another at once.
            self._discovering, self._next_discovery = True, float("inf")
            actions.append(
                Discover(self.fleet.snapshot.leases, self.fleet.streams(), self._cfg.max_moves_per_second)
            )
        return actions

    def on_table(self, snap: TableSnapshot, now: float, leaving: bool) -> FleetPlan:
        self.fleet.observe(snap, now)
        self._read_at = now
        self.scan_soon(now, self.fleet.next_owner_death(now) - now)
        return self._plan(now, now, leaving)

    def plan_leaving(self, now: float, owned: frozenset[str]) -> FleetPlan | None:
        """We start leaving: the hand-offs of our own leases (``owned``), planned at once from the table we
        hold, as of when we read it (the view's durations all end there), so that our shards need not wait
        for another read of the whole table (one that grows with the table). None when that read is older
        than a scan interval or does not show every lease of ours as ours: read the table first, as ever.
        The plan keeps only our leases' part; the rest of the fleet's waits for the next read."""
        read_at = self._read_at
        if not self.active or read_at is None or now - read_at > self._cfg.scan_interval:
            return None
        held = {x.key for x in self.fleet.snapshot.leases if x.owner == self.me}
        if not owned <= held:
            return None
        p = self._plan(now, read_at, leaving=True)
        ours = FleetPlan(
            request=tuple((x, to) for x, to in p.request if x.owner == self.me),
            stalled=p.stalled,  # what was reported stays reported (``write`` forgets what is not listed)
            stranded=tuple(x for x in p.stranded if x.owner == self.me),
            truncated=p.truncated,
        )
        self._tokens += p.cost - ours.cost  # what the fleet's part would have spent is not spent
        return ours

    def _plan(self, now: float, seen_at: float, leaving: bool) -> FleetPlan:
        """The fleet plan from the table read at ``seen_at``, within the budget of moves saved up by ``now``."""
        rate = self._cfg.max_moves_per_second
        self._tokens = min(float(rate), self._tokens + max(0.0, now - self._filled_at) * rate)
        self._filled_at = now
        p = self.fleet.plan(seen_at, leaving, int(self._tokens))
        self._tokens -= p.cost
        if p.truncated:  # more to do: read and plan again once a fifth of a second's worth has come in
            self.scan_soon(now, max(0.0, (rate / 5 - self._tokens) / rate))
        return p

    def write(self, p: FleetPlan, now: float) -> list[Action]:
        """The plan's writes, its stall reports, and the dead worker items to forget."""
        actions: list[Action] = [
            LeaseWrite(WriteKind.ASSIGN, lease, to=to, dead_owner=dead) for lease, to, dead in p.assign
        ]
        for lease, dead in ((x, d) for x, _, d in p.assign if d is not None):
            log_event(logger, "lease_expired", logging.WARNING, lease=lease.key, dead_owner=dead.worker_id)
        actions += [LeaseWrite(WriteKind.REQUEST, lease, to=to) for lease, to in p.request]
        actions += [LeaseWrite(WriteKind.DECLINE, lease) for lease in p.withdraw]
        for lease in p.stalled:
            if lease.key not in self._stall_reported:
                self._stall_reported.add(lease.key)
                log_event(logger, "handoff_stalled", logging.WARNING, lease=lease.key, owner=lease.owner)
                actions.append(Metric("HandoffsStalled", 1, lease.stream, lease.shard_id))
        self._stall_reported &= {x.key for x in p.stalled}
        return actions + [Forget(w) for w in self.fleet.to_forget(now)]

    def on_written(self, ev: ActionResult, now: float) -> list[Action]:
        """The result of one of the leader's writes (an owner's own writes never come here)."""
        if ev.result is not Result.OK:
            self.scan_soon(now, 0.0 if ev.result is Result.CONFLICT else _AFTER_FAILURE)
            return []
        if ev.kind is WriteKind.REQUEST:
            return [Metric("HandoffsRequested", 1, ev.lease.stream, ev.lease.shard_id)]
        if ev.kind is WriteKind.ASSIGN:
            return [Metric("LeasesAssigned", 1, ev.lease.stream, ev.lease.shard_id)]
        return []

    def on_discovered(self, ev: Discovered, now: float) -> list[Action]:
        self._discovering = False
        if not self.active:
            return []
        if self._streams_gone(ev) or ev.changed:
            self.scan_soon(now)
        # From when it ended; with thousands of new shards, a second's worth of creations at a time.
        self._next_discovery = now + (1.0 if ev.more else self._cfg.discovery_interval)
        return []

    def _streams_gone(self, ev: Discovered) -> bool:
        """Take in which streams Kinesis says are gone (``ev.missing``) or there (``ev.listed``): a gone
        stream's leases are assigned to nobody (``FleetView.gone``) and discovery, which goes on at its
        interval, tells when a stream of that name exists again. Each change is told once; whether any."""
        was = self.fleet.gone
        now_gone = (was | ev.missing) - ev.listed
        for stream in sorted(now_gone - was):
            log_event(
                logger,
                "stream_gone",
                logging.WARNING,
                stream=stream,
                leases=sum(1 for x in self.fleet.snapshot.leases if x.stream == stream),
                doing="its leases are assigned to nobody; the other streams go on; discovery looks for it "
                f"again every {self._cfg.discovery_interval:g} s and resumes it if it exists again",
                fix="remove it from CONSUMER_STREAMS and roll the service, or recreate the stream",
            )
        for stream in sorted(was - now_gone):
            log_event(
                logger, "stream_back", logging.WARNING, stream=stream, doing="its leases are assigned again"
            )
        self.fleet.gone = now_gone
        return now_gone != was
