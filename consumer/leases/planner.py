"""Lease planning helpers shared by the leader's fleet plan (fleet_plan.py) and shutdown hand-offs.

A lease is ready when it is ACTIVE and every parent is ENDED or gone (parents before children); every live,
non-draining worker has a fair share of the ready leases, the extras going to those already holding most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from consumer.leases.model import Lease

__all__ = ["fair_shares", "plan_shutdown", "ready_leases"]


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


def fair_shares(
    n_leases: int,
    holdings: Mapping[str, int],
    max_leases: int | None = None,
    elsewhere: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Each worker's target count of one stream's ``n_leases``; the extra ``n % w`` go to those holding the
    fewest leases of the fleet's other streams (``elsewhere``), then to those already holding the most of
    this one (no move), then by name. So many small streams spread over the fleet instead of each one's
    extra lease going to the same worker."""
    other = elsewhere or {}
    workers = sorted(holdings, key=lambda w: (other.get(w, 0), -holdings[w], w))
    if not workers:
        return {}
    base, extra = divmod(n_leases, len(workers))
    targets = {w: base + (1 if i < extra else 0) for i, w in enumerate(workers)}
    if max_leases is not None:
        targets = {w: min(t, max_leases) for w, t in targets.items()}
    return targets


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
