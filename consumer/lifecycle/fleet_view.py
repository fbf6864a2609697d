"""What the leader knows of the fleet from its last read of the lease table, and the decisions that follow
from it alone: who is alive, what the fleet plan says, whom to hand a lease to, which dead items to forget.

Pure: ``now`` (monotonic) comes in; nothing here reads a clock or calls DynamoDB. Every duration is measured
on this leader's monotonic clock from when it saw something change: the wall-clock stamps in the table
(``heartbeat_ms``, ``started_ms``, ``handoff_requested_ms``) are other workers' clocks, kept for display only.
"""

from __future__ import annotations

import logging
from collections import Counter

from consumer.config import LeaseConfig
from consumer.leases.fleet_plan import FleetInput, FleetPlan, merge, plan_fleet
from consumer.leases.liveness import LivenessTracker
from consumer.leases.model import WorkerItem, stream_of
from consumer.leases.planner import plan_shutdown
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.logs import log_event

__all__ = ["FleetView"]

logger = logging.getLogger(__name__)

#: How long, in lease durations, a worker that gave a lease up is not asked for (``FleetView.held_off``).
_HOLD_OFF_LEASES = 3


class FleetView:
    def __init__(self, me: str, streams: frozenset[str], config: LeaseConfig) -> None:
        self.me = me
        self._streams = streams
        self._cfg = config
        self._liveness = LivenessTracker(config.lease_duration)
        self.snapshot = TableSnapshot((), ())
        self._forgetting: set[tuple[str, int]] = set()
        self._known_dead: dict[str, OwnerObservation] = {}  # a leader we replaced, fenced by our claim
        # Hand-off requests in the table: key -> (who asked, when we first saw that request).
        self._requests: dict[str, tuple[str, float]] = {}
        self._told_durations: set[tuple[str, int]] = set()  # (worker, lease duration) mismatches logged
        # Streams Kinesis said are gone (the leader's discovery): their leases are planned for by nobody, so
        # nothing takes them and nothing churns, until a discovery lists the stream again.
        self.gone: frozenset[str] = frozenset()
        # Workers the first scan of our term showed, each with the heartbeat (incarnation, counter) it had
        # then; None until that scan. Until its heartbeat moves past that value a worker is not proven dead
        # but not seen alive either (we may have no history of it, or only a stale one from an earlier term):
        # nobody is asked to hand it a lease, nor is it a successor. A worker that appears in a later scan
        # registered since the one before: alive at once.
        self._first_seen: dict[str, tuple[str, int]] | None = None
        # Workers that gave a lease up (a member's release naming it, or our own), with when we last learned
        # of it: for ``hold_off`` after that, no owner is asked to hand it a lease (a worker that cannot reach
        # Kinesis would otherwise get its share back within a scan, and each shard stall again until it gives
        # up once more).
        self._gave_up: dict[str, float] = {}
        self._hold_off = _HOLD_OFF_LEASES * config.lease_duration

    def begin(self) -> None:
        """We lead from now on: the next scan is our term's first (what we saw while we led before, if we
        did, is history that a heartbeat's move since does not date), and each hand-off request it finds is
        watched from then on, like a new leader's (another leader may have withdrawn and made it again)."""
        self._first_seen = None
        self._requests = {}

    def known_dead(self, obs: OwnerObservation) -> None:
        """A worker we proved dead ourselves (we claimed leadership from it): no need to watch it again."""
        self._known_dead[obs.worker_id] = obs

    def _still_dead(self, worker_id: str) -> OwnerObservation | None:
        obs = self._known_dead.get(worker_id)
        if obs is None:
            return None
        item = next((w for w in self.snapshot.workers if w.worker_id == worker_id), None)
        if (None if item is None else item.heartbeat) != obs.heartbeat:
            del self._known_dead[worker_id]  # it moved after all: watch it like anyone else
            return None
        return obs

    def observe(self, snap: TableSnapshot, now: float) -> TableSnapshot:
        """Take in a fresh read of the whole table."""
        self.snapshot = snap
        self._liveness.observe(snap.workers, snap.leases, now)
        beats = {w.worker_id: (w.incarnation, w.heartbeat) for w in snap.workers if w.worker_id != self.me}
        if self._first_seen is None:
            self._first_seen = beats
        else:  # a mark goes when its heartbeat moves or it is dead (any move after that is one we saw); an
            # item missing from this read (eventually consistent) keeps it: it may be back unmoved in the next
            self._first_seen = {
                k: v
                for k, v in self._first_seen.items()
                if k not in beats or (beats[k] == v and self._liveness.is_alive(k, now))
            }
        for lease in snap.leases:  # a member's give-up: released, naming it, until we assign the lease
            if lease.owner is None and lease.given_up_by is not None:
                self.gave_up(lease.given_up_by, now)
        self._tell_other_durations(snap.workers)
        # Forget what no longer is: items asked to be forgotten that are gone (or moved), and leaders we
        # replaced that neither have an item nor own a lease any more.
        present = {(w.worker_id, w.heartbeat) for w in snap.workers}
        self._forgetting &= present
        relevant = {w.worker_id for w in snap.workers} | {x.owner for x in snap.leases if x.owner is not None}
        self._known_dead = {k: v for k, v in self._known_dead.items() if k in relevant}
        requests = {x.key: x.handoff_to for x in snap.leases if x.handoff_to is not None}
        self._requests = {
            key: seen if (seen := self._requests.get(key)) is not None and seen[0] == to else (to, now)
            for key, to in requests.items()
        }
        return self.snapshot

    def _tell_other_durations(self, workers: tuple[WorkerItem, ...]) -> None:
        """Log once per worker (and value) a lease duration other than ours: the fleet's settings disagree.
        A longer one is waited out (``LivenessTracker``); a shorter one is safe but its owner suspends first."""
        ours = round(self._cfg.lease_duration * 1000)
        self._told_durations &= {(w.worker_id, w.lease_duration_ms) for w in workers}
        for w in workers:
            told = (w.worker_id, w.lease_duration_ms)
            if w.lease_duration_ms in (0, ours) or told in self._told_durations:
                continue
            self._told_durations.add(told)
            log_event(
                logger,
                "lease_duration_mismatch",
                logging.WARNING,
                worker=w.worker_id,
                its_lease_duration_s=w.lease_duration_ms / 1000,
                ours_s=self._cfg.lease_duration,
                leader=self.me,
                hint="set CONSUMER_LEASE_DURATION_SECONDS alike on every worker of the fleet; until then its "
                "leases are taken only after the longer of the two",
            )

    def next_owner_death(self, now: float) -> float:
        """The first moment after ``now`` at which an owner of a lease, other than us, turns dead unless its
        heartbeat moves first (infinity if none will): the time to read the table again, so that its leases
        are taken a lease duration after its silence began rather than up to a scan interval later."""
        owners = {x.owner for x in self.snapshot.leases if x.owner not in (None, self.me) and not x.ended}
        ends = (self._liveness.silence_ends(o) for o in owners if o is not None)
        return min((t for t in ends if t > now), default=float("inf"))

    def stalled_requests(self, now: float) -> frozenset[str]:
        """Lease keys whose hand-off request we have watched stand for the stall time (a new leader starts
        every request it finds at "just seen")."""
        stall = self._cfg.handoff_stall_after
        return frozenset(key for key, (_to, since) in self._requests.items() if now - since >= stall)

    def streams(self) -> tuple[str, ...]:
        """Every stream that we or a worker in the table consume (during a deploy that adds a stream, only
        the workers of the new version get its leases)."""
        return tuple(sorted(self._streams.union(*(w.streams for w in self.snapshot.workers))))

    def _consumers(self, stream: str, live: frozenset[str]) -> frozenset[str]:
        mine = {self.me} if stream in self._streams else set()
        return frozenset(
            w.worker_id for w in self.snapshot.workers if w.worker_id in live and stream in w.streams
        ) | (mine & live)

    def live(self, now: float) -> frozenset[str]:
        """Workers not proven dead, whose leases stay theirs: heartbeat (incarnation and counter) seen
        changing within a lease duration, on our monotonic clock. A worker we see for the first time counts as
        just seen: a new leader waits out a crashed worker's item for one lease duration rather than trust its
        wall stamps. Those of them not yet seen alive are ``unproven``."""
        return frozenset(
            w.worker_id
            for w in self.snapshot.workers
            if self._liveness.is_alive(w.worker_id, now) and self._still_dead(w.worker_id) is None
        ) | {self.me}

    def unproven(self) -> frozenset[str]:
        """Workers whose heartbeat has not moved since the first scan of our term: not seen alive (a worker
        killed just before we started leading looks the same for a lease duration), so not asked for."""
        return frozenset(self._first_seen or ())

    def gave_up(self, worker_id: str, now: float) -> None:
        """``worker_id`` gave a lease up at ``now`` (ours is told by the coordinator, a member's read here)."""
        self._gave_up[worker_id] = max(now, self._gave_up.get(worker_id, now))

    def held_off(self, now: float) -> frozenset[str]:
        """Workers that gave a lease up within the hold-off (three lease durations): not asked for, nor
        handed a lease by a worker leaving or giving up, until it has passed (a free lease may still go to one
        when nobody else can take it)."""
        self._gave_up = {w: t for w, t in self._gave_up.items() if now - t < self._hold_off}
        return frozenset(self._gave_up)

    def seen_alive(self, now: float) -> frozenset[str]:
        """Live workers whose heartbeat we have seen move (or that registered) since our term's first scan,
        and us: the only ones a living owner is asked to hand a lease to, or hands one to on its own."""
        return self.live(now) - self.unproven()

    def successors(self, now: float) -> frozenset[str]:
        """Workers seen alive other than us, not draining and not held off: who may take a lease we give up."""
        draining = {w.worker_id for w in self.snapshot.workers if w.draining}
        return frozenset(self.seen_alive(now) - draining - self.held_off(now) - {self.me})

    def hand_to(self, keys: tuple[str, ...], now: float) -> dict[str, str | None]:
        """A successor for each of ``keys`` among the workers that consume its stream, least loaded first
        (None: nobody, release: the leader assigns it once a worker that consumes it can take it)."""
        successors = self.successors(now)
        out: dict[str, str | None] = {}
        for stream in sorted({stream_of(key) for key in keys}):
            mine = tuple(key for key in keys if stream_of(key) == stream)
            consumers = self._consumers(stream, successors) - {self.me}
            out.update(plan_shutdown(self.me, self.snapshot.leases, consumers, mine))
        return out

    def plan(self, now: float, leaving: bool = False, budget: int = 100) -> FleetPlan:
        """The fleet plan, stream by stream among the workers that consume it; ``leaving``: we are shutting
        down too (our leases go like a draining worker's); ``budget``: the moves it may spend (fleet_plan)."""
        live = self.live(now)
        unproven = live & self.unproven()
        stalled = self.stalled_requests(now)
        held_off = self.held_off(now)
        dead: dict[str, OwnerObservation] = {}
        for lease in self.snapshot.leases:
            if lease.owner is not None and lease.owner not in live and lease.owner not in dead:
                obs = self._still_dead(lease.owner) or self._liveness.dead_owner(lease.owner, now)
                if obs is not None:
                    dead[lease.owner] = obs
        draining = {w.worker_id for w in self.snapshot.workers if w.draining} | (
            {self.me} if leaving else set()
        )
        plans: list[FleetPlan] = []
        planned = [s for s in self.streams() if s not in self.gone]
        # Each worker's leases by stream: as held for the streams still to plan, as targeted once planned.
        counts: dict[str, Counter[str]] = {s: Counter() for s in planned}
        for x in self.snapshot.leases:
            if x.owner is not None and not x.ended and x.stream in counts:
                counts[x.stream][x.owner] += 1
        for stream in planned:
            elsewhere = sum((c for s, c in counts.items() if s != stream), Counter())
            p = plan_fleet(
                FleetInput(
                    leases=tuple(x for x in self.snapshot.leases if x.stream == stream),
                    live=self._consumers(stream, live - unproven),
                    unproven=self._consumers(stream, unproven),
                    held_off=held_off,
                    draining=frozenset(draining),
                    dead_owners=dead,
                    stalled_requests=stalled,
                    max_leases=self._cfg.max_leases_per_worker,
                    max_moves=budget,
                    elsewhere=elsewhere,
                )
            )
            budget -= p.cost
            counts[stream] = Counter(p.targets)
            plans.append(p)
        return merge(plans)

    def to_forget(self, now: float) -> list[WorkerItem]:
        """Worker items silent for ``forget_workers_seconds`` (as we watched them), each asked for once."""
        out = []
        for w in self.snapshot.workers:
            mark = (w.worker_id, w.heartbeat)
            # Never before its own lease has run out either (a worker started with a much longer lease).
            bound = max(self._cfg.forget_workers_seconds, 2 * w.lease_duration_ms / 1000)
            silent = self._liveness.silent_for(w.worker_id, now) >= bound
            if w.worker_id != self.me and silent and mark not in self._forgetting:
                self._forgetting.add(mark)
                log_event(logger, "worker_forgotten", worker=self.me, dead=w.worker_id)
                out.append(w)
        return out
