"""Lease planning as a pure function of (leases, live workers, dead owners, now).

Rules, in order (docs/protocol.md explains why):
1. Every live, non-draining worker has a fair share: ``N // W`` ready leases, plus one for the first
   ``N % W`` workers ordered by how many they already hold (so the current holders keep theirs).
2. An owner above its share gives a requested lease to a live requester; otherwise it declines.
3. A worker below its share takes unowned ready leases, then leases of owners seen dead for a whole lease
   duration, and only then asks living owners above their share for a hand-off — never taking from them.
4. A lease is ready when it is ACTIVE and every parent is ENDED or gone (parents before children).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from consumer.leases.model import Lease
from consumer.leases.repository import OwnerObservation

__all__ = ["Plan", "PlanInput", "fair_shares", "plan", "plan_shutdown", "ready_leases"]


@dataclass(frozen=True)
class PlanInput:
    me: str
    leases: tuple[Lease, ...]
    live_workers: frozenset[str]  # alive by heartbeat, including ``me`` when running
    draining_workers: frozenset[str]
    dead_owners: Mapping[str, OwnerObservation]
    now_ms: int
    handoff_stall_ms: int
    max_leases: int | None = None


@dataclass(frozen=True)
class Plan:
    take: tuple[Lease, ...] = ()
    steal: tuple[tuple[Lease, OwnerObservation], ...] = ()
    request: tuple[Lease, ...] = ()
    give: tuple[tuple[Lease, str], ...] = ()
    decline: tuple[Lease, ...] = ()
    stalled: tuple[Lease, ...] = ()
    targets: Mapping[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.take or self.steal or self.request or self.give or self.decline)


def ready_leases(leases: tuple[Lease, ...]) -> list[Lease]:
    """ACTIVE leases whose parents have all ENDED (or were retired / trimmed away)."""
    by_shard = {(lease.stream, lease.shard_id): lease for lease in leases}
    out = []
    for lease in leases:
        if lease.ended:
            continue
        parents = (by_shard.get((lease.stream, p)) for p in lease.parents)
        if all(p is None or p.ended for p in parents):
            out.append(lease)
    return out


def fair_shares(n_leases: int, holdings: Mapping[str, int], max_leases: int | None = None) -> dict[str, int]:
    """Each worker's target count; the extra ``n % w`` go to those already holding the most."""
    workers = sorted(holdings, key=lambda w: (-holdings[w], w))
    if not workers:
        return {}
    base, extra = divmod(n_leases, len(workers))
    targets = {w: base + (1 if i < extra else 0) for i, w in enumerate(workers)}
    if max_leases is not None:
        targets = {w: min(t, max_leases) for w, t in targets.items()}
    return targets


def _spread(me: str, lease: Lease) -> str:
    """A per-worker order over leases, so that workers racing for unowned leases pick different ones."""
    return hashlib.blake2b(f"{me}|{lease.key}".encode(), digest_size=8).hexdigest()


def _answer_requests(
    me: str,
    ready: list[Lease],
    active: frozenset[str],
    holdings: Counter[str],
    targets: Mapping[str, int],
) -> tuple[list[tuple[Lease, str]], list[Lease]]:
    """Rule 2: give a requested lease while above our share to a live requester below its own; else decline.
    ``holdings`` is updated for what is given."""
    give: list[tuple[Lease, str]] = []
    decline: list[Lease] = []
    for lease in sorted((x for x in ready if x.owner == me and x.handoff_to), key=lambda x: x.key):
        requester = lease.handoff_to
        assert requester is not None
        below = holdings.get(requester, 0) < targets.get(requester, 0)
        if requester in active and requester != me and holdings[me] > targets[me] and below:
            give.append((lease, requester))
            holdings[me] -= 1
            holdings[requester] += 1
        else:
            decline.append(lease)
    return give, decline


def plan(inp: PlanInput) -> Plan:
    me = inp.me
    active = frozenset(inp.live_workers - inp.draining_workers)
    ready = ready_leases(inp.leases)
    holdings: Counter[str] = Counter(o for o in (x.owner for x in ready) if o is not None and o in active)
    targets = fair_shares(len(ready), {w: holdings.get(w, 0) for w in active}, inp.max_leases)
    if me not in active:
        return Plan(targets=targets)

    target = targets[me]
    give, decline = _answer_requests(me, ready, active, holdings, targets)
    deficit = target - holdings.get(me, 0)
    pending = [x for x in ready if x.handoff_to == me and x.owner != me]
    stalled = tuple(
        x
        for x in pending
        if x.handoff_requested_ms is not None and inp.now_ms - x.handoff_requested_ms >= inp.handoff_stall_ms
    )
    take: list[Lease] = []
    steal: list[tuple[Lease, OwnerObservation]] = []
    request: list[Lease] = []
    if deficit > 0:
        unowned = sorted((x for x in ready if x.owner is None), key=lambda x: _spread(me, x))
        take = unowned[:deficit]
        deficit -= len(take)
    if deficit > 0:
        orphans = sorted(
            (
                x
                for x in ready
                if x.owner is not None and x.owner in inp.dead_owners and x.owner not in active
            ),
            key=lambda x: _spread(me, x),
        )
        for lease in orphans[:deficit]:
            assert lease.owner is not None
            steal.append((lease, inp.dead_owners[lease.owner]))
        deficit -= len(steal)
    deficit -= len(pending)
    if deficit > 0:
        surplus = {w: holdings.get(w, 0) - targets[w] for w in active if w != me}
        candidates = sorted(
            (x for x in ready if x.owner in surplus and x.handoff_to is None),
            key=lambda x: (-surplus[x.owner or ""], _spread(me, x)),
        )
        for lease in candidates:
            owner = lease.owner or ""
            if deficit <= 0:
                break
            if surplus[owner] <= 0:
                continue
            request.append(lease)
            surplus[owner] -= 1
            deficit -= 1
    return Plan(
        take=tuple(take),
        steal=tuple(steal),
        request=tuple(request),
        give=tuple(give),
        decline=tuple(decline),
        stalled=stalled,
        targets=targets,
    )


def plan_shutdown(
    me: str, leases: tuple[Lease, ...], successors: frozenset[str], mine: tuple[str, ...]
) -> dict[str, str | None]:
    """Who gets each of ``mine`` (lease keys) when ``me`` shuts down: one at a time to the least loaded of
    ``successors`` (live, not draining), ties by name; ``None`` (release) when there is nobody."""
    load = Counter({w: 0 for w in successors if w != me})
    for lease in leases:
        if lease.owner is not None and lease.owner in load and not lease.ended:
            load[lease.owner] += 1
    out: dict[str, str | None] = {}
    for key in sorted(mine):
        if not load:
            out[key] = None
            continue
        to = min(load, key=lambda w: (load[w], w))
        load[to] += 1
        out[key] = to
    return out
