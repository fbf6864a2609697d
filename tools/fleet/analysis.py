"""Pure analysis of a fleet run: losses, duplicates, ownership runs, hand-off gaps, failover times."""

from __future__ import annotations

import bisect
import itertools
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PHASES",
    "Delivery",
    "Move",
    "Run",
    "analyze",
    "handoff_moves",
    "handoff_phases",
    "ownership_runs",
    "percentiles",
    "producer_spacing",
    "zero_cost_gaps",
]


@dataclass(frozen=True)
class Delivery:
    worker: str
    shard: str
    sequence: str
    epoch: int
    t: float


@dataclass(frozen=True)
class Run:
    """A stretch of consecutive deliveries of one shard by one worker under one epoch."""

    shard: str
    worker: str
    epoch: int
    first: float
    last: float
    count: int


def ownership_runs(deliveries: Iterable[Delivery]) -> dict[str, list[Run]]:
    by_shard: dict[str, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_shard[d.shard].append(d)
    out: dict[str, list[Run]] = {}
    for shard, ds in by_shard.items():
        ds.sort(key=lambda d: d.t)
        runs: list[Run] = []
        for d in ds:
            if runs and runs[-1].worker == d.worker and runs[-1].epoch == d.epoch:
                r = runs[-1]
                runs[-1] = Run(shard, r.worker, r.epoch, r.first, d.t, r.count + 1)
            else:
                runs.append(Run(shard, d.worker, d.epoch, d.t, d.t, 1))
        out[shard] = runs
    return out


@dataclass(frozen=True)
class Move:
    """A shard changing hands: ``gap`` runs from the old owner's last delivery to the new owner's first."""

    shard: str
    source: str
    target: str
    epoch: int
    at: float
    gap: float


def handoff_moves(runs: Mapping[str, list[Run]]) -> list[Move]:
    """Every change of owner, in time order (a negative gap means both delivered the shard at once)."""
    out = [
        Move(shard, a.worker, b.worker, b.epoch, b.first, b.first - a.last)
        for shard, rs in runs.items()
        for a, b in itertools.pairwise(rs)
        if a.worker != b.worker
    ]
    return sorted(out, key=lambda m: m.at)


#: The steps of a planned hand-off, in order, each from one milestone to the next (``Milestones`` keys): from the
#: old owner's last delivery to its shard loop's end (the final checkpoint written), to the transfer committed,
#: to the successor reading the lease it was given, to its processor's ``initialize`` (the checkpoint read),
#: to its first delivery (GetShardIterator, GetRecords, and a paced wait if that first read came back empty).
PHASES = ("final checkpoint", "transfer", "successor hears", "successor starts", "first read")

#: (milestone, shard, epoch) -> when it happened (epoch time): ``drained`` (old owner, its epoch),
#: ``handed_over`` and ``received`` (the new epoch), ``init`` (the successor's processor, the new epoch).
Milestones = Mapping[tuple[str, str, int], float]


def handoff_phases(
    runs: Mapping[str, list[Run]], milestones: Milestones
) -> dict[tuple[str, int], dict[str, float]]:
    """(shard, new epoch) -> seconds spent in each of ``PHASES``, for every change of owner whose milestones
    were all logged; they add up to the move's gap. Only planned hand-offs log ``handed_over``: a take after a
    crash has no such step and is left out."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for shard, rs in runs.items():
        for a, b in itertools.pairwise(rs):
            if a.worker == b.worker:
                continue
            marks = [milestones.get(("drained", shard, a.epoch))] + [
                milestones.get((m, shard, b.epoch)) for m in ("handed_over", "received", "init")
            ]
            if any(m is None for m in marks):
                continue
            points = [a.last, *(m for m in marks if m is not None), b.first]
            out[(shard, b.epoch)] = {
                p: round(t1 - t0, 3) for p, (t0, t1) in zip(PHASES, itertools.pairwise(points), strict=True)
            }
    return out


def _rank(s: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``s``: with 100 values, p99 is the second largest, not the max."""
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
    s = sorted(values)
    return {
        "n": len(s),
        "p50": round(statistics.median(s), 3),
        "p95": round(_rank(s, 0.95), 3),
        "p99": round(_rank(s, 0.99), 3),
        "max": round(s[-1], 3),
    }


def producer_spacing(produced: Iterable[tuple[str, str, float]]) -> dict[str, float | None]:
    """Seconds between consecutive puts that reached the same shard (one PutRecords call is one put).

    Every hand-off gap includes the wait for the shard's next record: on average half of this interval.
    """
    times: dict[str, set[float]] = defaultdict(set)
    for shard, _, t in produced:
        times[shard].add(t)
    intervals = [b - a for ts in times.values() for a, b in itertools.pairwise(sorted(ts))]
    out = percentiles(intervals)
    out["mean"] = round(statistics.fmean(intervals), 3) if intervals else None
    return out


def zero_cost_gaps(deliveries: Iterable[Delivery], samples: int = 2000, seed: int = 0) -> list[float]:
    """The gaps a hand-off that took no time at all would show, under the same producer and pacing.

    Such a hand-off, at instant ``tau``, would leave the shard silent from the last delivery before ``tau`` to
    the next delivery after it, exactly as if nobody had moved. So: instants drawn uniformly over the time
    each shard spent with one owner (the old owner's run, hand-off boundaries excluded), and for each the
    silence around it. Every measured gap contains this floor: the wait for the shard's next record and for
    the next paced GetRecords.
    """
    times: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for d in deliveries:
        times[(d.shard, d.worker, d.epoch)].append(d.t)
    spans = [sorted(ts) for ts in times.values() if len(ts) > 1]
    spans = [ts for ts in spans if ts[-1] > ts[0]]
    if not spans:
        return []
    rng = random.Random(seed)
    weights = [ts[-1] - ts[0] for ts in spans]
    out = []
    for ts in rng.choices(spans, weights, k=samples):
        tau = rng.uniform(ts[0], ts[-1])
        i = bisect.bisect_right(ts, tau)  # ts[i - 1] <= tau < ts[i]
        out.append(ts[min(i, len(ts) - 1)] - ts[max(i - 1, 0)])
    return out


def analyze(
    produced: Iterable[tuple[str, str]],
    deliveries: list[Delivery],
    signals: Mapping[str, float] | None = None,
    owners_at_signal: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Figures for one scenario.

    ``produced``: (shard, sequence) of every record the producer wrote. ``signals``: worker -> time it was
    sent SIGTERM or SIGKILL; ``owners_at_signal``: worker -> shards it delivered last before that signal.
    """
    produced_set = set(produced)
    counts = Counter((d.shard, d.sequence) for d in deliveries)
    lost = produced_set - set(counts)
    twice = [k for k, c in counts.items() if c > 1]
    runs = ownership_runs(deliveries)
    changes = handoff_moves(runs)
    gaps = [m.gap for m in changes]
    overlaps = sum(1 for m in changes if m.gap < 0)  # two workers delivered this shard at the same time
    moves = [
        {
            "shard": m.shard,
            "from": m.source,
            "to": m.target,
            "epoch": m.epoch,
            "at": round(m.at, 3),
            "gap_s": round(m.gap, 3),
        }
        for m in changes
    ]
    takeover: dict[tuple[str, str], float] = {}  # (signalled worker, shard): one per shard it owned
    for worker, t0 in (signals or {}).items():
        for shard in (owners_at_signal or {}).get(worker, []):
            rs = runs.get(shard, [])
            mine = [i for i, r in enumerate(rs) if r.worker == worker and r.first < t0]
            if not mine:
                continue
            later = rs[mine[-1] + 1 :]
            # A shard that another worker already delivered before the signal had moved before it: the
            # signal did not move it (counting it would time the next move, a cycle later).
            if later and later[0].first < t0:
                continue
            after = [r.first for r in later if r.worker != worker]
            if after:
                takeover[(worker, shard)] = round(min(after) - t0, 3)
    return {
        "produced": len(produced_set),
        "delivered": sum(counts.values()),
        "distinct_delivered": len(counts),
        "lost": len(lost),
        "delivered_more_than_once": len(twice),
        "extra_deliveries": sum(counts[k] - 1 for k in twice),
        "concurrent_owner_overlaps": overlaps,
        "moved_shards": len(moves),
        "handoff_gap_s": percentiles(gaps),
        "zero_cost_gap_s": percentiles(zero_cost_gaps(deliveries)),
        "signal_to_new_owner_first_record_s": percentiles(list(takeover.values())),
        "moves": moves,
    }
