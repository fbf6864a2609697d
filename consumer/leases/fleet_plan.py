"""The leader's plan for the whole fleet, as a pure function of the lease table it read.

Rules (docs/protocol.md, "The leader's plan"):
1. Every live, non-draining worker has a fair share of the ready leases (``fair_shares``); so has a worker
   not yet proven dead whose heartbeat this leader has not yet seen move (``unproven``: a new leader's first
   scan showed it and nothing since), which may also be assigned a free lease.
2. Unowned leases and leases of owners seen dead for a whole lease duration are assigned at once, to the
   workers furthest below their share (a lease its last owner gave up on goes to another worker if any).
3. Leases of draining workers, and leases of workers above their share, are moved by asking their owner to
   hand them to a live worker below its share (never to an unproven one, which may have died just before
   this leader started: the shard would sit idle until its lease expired; nor to one that gave a lease up
   lately, ``held_off``): the owner drains and transfers.
4. One request per lease at a time; a request whose requester left or no longer needs it is withdrawn; one
   whose owner is seen dead gives way to rule 2 (the take clears it).
5. At most ``max_moves`` units per plan (an assignment or a withdrawal one, a request two: it brings the
   owner's transfer), so that a fleet start of thousands of shards stays within the table's throughput.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from consumer.leases.model import Lease
from consumer.leases.planner import fair_shares, ready_leases
from consumer.leases.repository import OwnerObservation, TableSnapshot

__all__ = ["REQUEST_COST", "FleetInput", "FleetPlan", "merge", "plan_fleet"]

#: A request spends two units of the leader's budget: the request, then the owner's transfer it brings.
REQUEST_COST = 2


@dataclass(frozen=True)
class FleetInput:
    leases: tuple[Lease, ...]
    live: frozenset[str]  # heartbeat seen moving (draining ones included)
    draining: frozenset[str]
    dead_owners: Mapping[str, OwnerObservation]
    # Hand-off requests this leader has watched stand unanswered for the stall time, on its own monotonic
    # clock (the request's wall stamp is another worker's clock: for display only).
    stalled_requests: frozenset[str] = frozenset()
    max_leases: int | None = None
    max_moves: int = 100
    # Not yet proven dead, but not seen alive either (its heartbeat not yet seen moving: a new leader's first
    # scan showed it, and nothing since): its leases stay its own, it has a share and may be given a free
    # lease, a request already made to it stands, but no owner is asked to hand it a lease.
    unproven: frozenset[str] = frozenset()
    # Workers that gave a lease up lately (``FleetView.held_off``): no owner is asked to hand them a lease, so
    # that a worker whose fault is its own (it cannot reach Kinesis) is not handed its share back at once.
    held_off: frozenset[str] = frozenset()
    # Leases each worker holds (or is planned to) of the fleet's other streams: a stream's extra leases go to
    # the workers with the fewest (``fair_shares``).
    elsewhere: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetPlan:
    assign: tuple[tuple[Lease, str, OwnerObservation | None], ...] = ()
    request: tuple[tuple[Lease, str], ...] = ()
    withdraw: tuple[Lease, ...] = ()
    stalled: tuple[Lease, ...] = ()
    stranded: tuple[Lease, ...] = ()  # a draining owner's leases with nobody to take them
    targets: Mapping[str, int] = field(default_factory=dict)
    truncated: bool = False

    @property
    def moves(self) -> int:
        return len(self.assign) + len(self.request) + len(self.withdraw)

    @property
    def cost(self) -> int:
        """What the plan spends of the leader's budget (a request costs two: it and the transfer it brings)."""
        return len(self.assign) + REQUEST_COST * len(self.request) + len(self.withdraw)

    def moves_for(self, me: str, snapshot: TableSnapshot) -> bool:
        """Whether a hand-off asked of worker ``me`` or for it is planned here or under way in ``snapshot``
        (the table this plan was made from): ``me`` learns of its steps through its own item only. (A lease
        the leader assigns itself starts from the write's result; one that moves between other workers needs
        nothing of ``me``.)"""
        return (
            any(me in (lease.owner, to) for lease, to in self.request)
            or any(me in (lease.owner, lease.handoff_to) for lease in self.withdraw)
            or any(x.handoff_to is not None and me in (x.owner, x.handoff_to) for x in snapshot.leases)
        )


class _Loads:
    """How many ready leases each active worker holds or has coming, against its share; a heap finds the
    worker furthest below its share in log time (a plan for 10,000 shards and 2,500 workers stays cheap), a
    second one the same among the workers seen alive (``live``), who alone may be asked for (while every
    worker is seen alive, both are the same heap)."""

    def __init__(
        self, active: frozenset[str], holdings: Counter[str], targets: Mapping[str, int], live: frozenset[str]
    ) -> None:
        self.load = Counter({w: holdings.get(w, 0) for w in active})
        self.targets = targets
        self._heap = [self._key(w) for w in self.load]
        heapq.heapify(self._heap)
        self._live = live
        self._live_heap = self._heap
        if not active <= live:
            self._live_heap = [self._key(w) for w in self.load if w in live]
            heapq.heapify(self._live_heap)

    def _key(self, w: str) -> tuple[int, int, str]:
        return (self.load[w] - self.targets.get(w, 0), self.load[w], w)

    def below(self, w: str) -> bool:
        return self.load[w] < self.targets.get(w, 0)

    def _best(self, heap: list[tuple[int, int, str]], avoid: str | None) -> str | None:
        """The worker with the smallest key in ``heap`` other than ``avoid`` (stale entries are dropped)."""
        aside = []
        found = None
        while heap:
            entry = heap[0]
            if entry != self._key(entry[2]):
                heapq.heappop(heap)
                continue
            if entry[2] == avoid:
                aside.append(heapq.heappop(heap))
                continue
            found = entry[2]
            break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    def asked_recipient(self) -> str | None:
        """The worker seen alive furthest below its share (ties: fewest leases, then name), if any is below:
        whom an owner may be asked to hand a lease to."""
        best = self._best(self._live_heap, None)
        return best if best is not None and self.below(best) else None

    def recipient(self, avoid: str | None = None) -> str | None:
        """The worker furthest below its share (ties: fewest leases, then name). ``avoid`` (the worker that
        gave this lease up) only when nobody else is active; another worker takes it even above its share."""
        best = self._best(self._heap, avoid)
        if best is not None and (self.below(best) or avoid in self.load):
            return best
        return avoid if avoid is not None and avoid in self.load and self.below(avoid) else None

    def move(self, owner: str | None, to: str) -> None:
        self.load[to] += 1
        self._push(to)
        if owner is not None and owner in self.load:
            self.load[owner] -= 1
            self._push(owner)

    def _push(self, w: str) -> None:
        heapq.heappush(self._heap, self._key(w))
        if self._live_heap is not self._heap and w in self._live:
            heapq.heappush(self._live_heap, self._key(w))


def _pending(
    ready: list[Lease], active: frozenset[str], inp: FleetInput
) -> tuple[dict[str, str], list[Lease], list[Lease]]:
    """Requests already in the table: those still wanted (key -> requester) count as moves under way; the
    rest are withdrawn. A request to an owner seen dead is neither: nobody will answer it, and the lease is
    assigned as any dead owner's is (``_orphans``; taking it clears the request)."""
    wanted: dict[str, str] = {}
    withdraw: list[Lease] = []
    stalled: list[Lease] = []
    alive = inp.live | inp.unproven
    for lease in sorted((x for x in ready if x.handoff_to is not None), key=_by_key):
        to = lease.handoff_to
        if lease.owner is not None and lease.owner not in alive and lease.owner in inp.dead_owners:
            continue
        if to is None or to not in active or to == lease.owner or lease.owner is None:
            withdraw.append(lease)
            continue
        wanted[lease.key] = to
        if lease.key in inp.stalled_requests:
            stalled.append(lease)
    return wanted, withdraw, stalled


def _orphans(ready: list[Lease], inp: FleetInput) -> list[tuple[Lease, OwnerObservation | None]]:
    """Unowned leases, then leases of owners seen dead for a whole lease duration."""
    unowned: list[tuple[Lease, OwnerObservation | None]] = [(x, None) for x in ready if x.owner is None]
    alive = inp.live | inp.unproven
    dead: list[tuple[Lease, OwnerObservation | None]] = [
        (x, inp.dead_owners[x.owner])
        for x in ready
        if x.owner is not None and x.owner not in alive and x.owner in inp.dead_owners
    ]
    return sorted(unowned, key=lambda p: p[0].key) + sorted(dead, key=lambda p: p[0].key)


def plan_fleet(inp: FleetInput) -> FleetPlan:
    alive = inp.live | inp.unproven  # not proven dead: their leases stay theirs
    active = frozenset(alive - inp.draining)
    ready = ready_leases(inp.leases)
    wanted, withdraw, stalled = _pending(ready, active, inp)
    # Shares follow the holdings once the moves under way are done, so that they stay put while they finish.
    holdings: Counter[str] = Counter(w for x in ready if (w := wanted.get(x.key, x.owner)) in active)
    targets = fair_shares(len(ready), {w: holdings.get(w, 0) for w in active}, inp.max_leases, inp.elsewhere)
    loads = _Loads(active, holdings, targets, inp.live - inp.held_off)
    asked = set(wanted)
    budget = inp.max_moves - len(withdraw)
    skipped = False

    assign: list[tuple[Lease, str, OwnerObservation | None]] = []
    for lease, dead in _orphans(ready, inp):
        to = loads.recipient(avoid=lease.given_up_by)
        if to is None:
            break
        if budget < 1:
            skipped = True
            break
        assign.append((lease, to, dead))
        loads.move(None, to)
        budget -= 1

    # Draining owners' leases first: their owner is waiting to exit.
    movable = sorted(
        (x for x in ready if x.key not in asked and x.owner is not None),
        key=lambda x: (x.owner not in inp.draining, x.key),
    )
    request: list[tuple[Lease, str]] = []
    stranded: list[Lease] = []
    for lease in movable:
        owner = lease.owner or ""
        leaving = owner in inp.draining and owner in alive
        if not leaving and (owner not in active or loads.load[owner] <= targets.get(owner, 0)):
            continue  # a dead owner's (assigned above) or one within its share
        to = loads.asked_recipient()
        if to is None:
            if leaving and loads.recipient() is None:  # nobody below its share, even among the unproven
                stranded.append(lease)
            continue  # (an unproven worker is below its share: ask once its heartbeat is seen moving)
        if budget < REQUEST_COST:
            skipped = True
            continue
        request.append((lease, to))
        loads.move(owner, to)
        budget -= REQUEST_COST

    return FleetPlan(
        assign=tuple(assign),
        request=tuple(request),
        withdraw=tuple(withdraw),
        stalled=tuple(stalled),
        stranded=tuple(stranded),
        targets=targets,
        truncated=skipped,
    )


def _by_key(lease: Lease) -> str:
    return lease.key


def merge(plans: list[FleetPlan]) -> FleetPlan:
    """One plan from the plans of several streams (targets are per stream, so they are not kept)."""
    return FleetPlan(
        assign=tuple(x for p in plans for x in p.assign),
        request=tuple(x for p in plans for x in p.request),
        withdraw=tuple(x for p in plans for x in p.withdraw),
        stalled=tuple(x for p in plans for x in p.stalled),
        stranded=tuple(x for p in plans for x in p.stranded),
        truncated=any(p.truncated for p in plans),
    )
