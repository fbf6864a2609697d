"""Pure analysis of a fleet run: losses, duplicates, ownership runs, hand-off gaps, failover times."""

from __future__ import annotations

import bisect
import itertools
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

__all__ = [
    "PHASES",
    "Delivery",
    "Kind",
    "Run",
    "analyze",
    "dynamodb_cost",
    "handoff_figures",
    "handoff_moves",
    "handoff_phases",
    "ownership_runs",
    "percentiles",
    "producer_figures",
    "zero_cost_gaps",
]


@dataclass(frozen=True)
class Delivery:
    """One record delivered, from a worker's journal (``t``: epoch seconds)."""

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


def ownership_runs(deliveries: Iterable[Delivery]) -> dict[str, list[Run]]:
    """shard -> its runs, in time order."""
    out: dict[str, list[Run]] = defaultdict(list)
    for d in sorted(deliveries, key=lambda d: (d.shard, d.t)):
        runs = out[d.shard]
        if runs and (runs[-1].worker, runs[-1].epoch) == (d.worker, d.epoch):
            runs[-1] = replace(runs[-1], last=d.t)
        else:
            runs.append(Run(d.shard, d.worker, d.epoch, d.t, d.t))
    return dict(out)


@dataclass(frozen=True)
class Move:
    """A shard changing hands at ``at``: ``gap`` is from the old owner's last delivery to the new's first."""

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


@dataclass(frozen=True)
class Kind:
    """The moves of one kind of hand-off: after ``since``, from ``sources``, to ``targets`` (None: any)."""

    since: float
    sources: Collection[str] | None = None
    targets: Collection[str] | None = None

    def of(self, moves: Iterable[Move]) -> list[Move]:
        """The moves of this kind."""
        return [
            m
            for m in moves
            if m.at >= self.since
            and (self.sources is None or m.source in self.sources)
            and (self.targets is None or m.target in self.targets)
        ]


#: A planned hand-off's steps, between the old owner's last delivery and the new owner's first.
PHASES = ("final checkpoint", "transfer", "successor hears", "successor starts", "first read")

#: (milestone, shard, epoch) -> when: ``drained`` (old epoch), ``handed_over``, ``received``, ``init`` (new).
Milestones = Mapping[tuple[str, str, int], float]


def handoff_phases(
    runs: Mapping[str, list[Run]], milestones: Milestones
) -> dict[tuple[str, int], dict[str, float]]:
    """(shard, new epoch) -> seconds spent in each of ``PHASES`` (they add up to the gap), for every change of
    owner whose milestones were all logged: a take after a crash logs no ``handed_over`` and is left out."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for shard, rs in runs.items():
        for a, b in itertools.pairwise(rs):
            keys = [("drained", shard, a.epoch)] + [
                (m, shard, b.epoch) for m in ("handed_over", "received", "init")
            ]
            if a.worker != b.worker and all(k in milestones for k in keys):
                points = [a.last, *(milestones[k] for k in keys), b.first]
                out[(shard, b.epoch)] = {
                    p: round(t1 - t0, 3)
                    for p, (t0, t1) in zip(PHASES, itertools.pairwise(points), strict=True)
                }
    return out


def _rank(s: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``s``: with 100 values, p99 is the second largest, not the max."""
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def percentiles(values: list[float]) -> dict[str, float | None]:
    """n, p50, p95, p99 and max of ``values`` (None when there are none)."""
    s = sorted(values)
    stats = (statistics.median(s), _rank(s, 0.95), _rank(s, 0.99), s[-1]) if s else (None,) * 4
    named = zip(("p50", "p95", "p99", "max"), stats, strict=True)
    return {"n": len(s)} | {k: None if v is None else round(v, 3) for k, v in named}


def producer_figures(produced: list[tuple[str, str, float]]) -> dict[str, Any]:
    """The producer's records a second, and the seconds between consecutive puts that reached the same shard
    (one PutRecords call is one put): every hand-off gap includes the wait for the shard's next record."""
    times: dict[str, set[float]] = defaultdict(set)
    for shard, _, t in produced:
        times[shard].add(t)
    intervals = [b - a for ts in times.values() for a, b in itertools.pairwise(sorted(ts))]
    spacing = percentiles(intervals) | {"mean": round(statistics.fmean(intervals), 3) if intervals else None}
    span = max(t for *_, t in produced) - min(t for *_, t in produced) if produced else 0.0
    return {
        "producer_record_interval_per_shard_s": spacing,
        "producer_records_per_s": round(len(produced) / span, 1) if span > 0 else None,
    }


def zero_cost_gaps(deliveries: Iterable[Delivery], samples: int = 2000, seed: int = 0) -> list[float]:
    """The gaps a hand-off that took no time would show under the same producer and pacing: the silence around
    instants drawn uniformly over the time each shard spent with one owner (hand-off boundaries excluded)."""
    times: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for d in deliveries:
        times[(d.shard, d.worker, d.epoch)].append(d.t)
    spans = [ts for ts in map(sorted, times.values()) if ts[-1] > ts[0]]
    if not spans:
        return []
    rng = random.Random(seed)
    out = []
    for ts in rng.choices(spans, [ts[-1] - ts[0] for ts in spans], k=samples):
        i = bisect.bisect_right(ts, rng.uniform(ts[0], ts[-1]))  # ts[i - 1] <= the instant < ts[i]
        out.append(ts[min(i, len(ts) - 1)] - ts[max(i - 1, 0)])
    return out


def _takeovers(
    runs: Mapping[str, list[Run]], signals: Mapping[str, float], owners: Mapping[str, list[str]]
) -> list[float]:
    """Per (signalled worker, shard it delivered last): from the signal to another worker's first delivery."""
    out = []
    for worker, t0 in signals.items():
        for shard in owners.get(worker, []):
            rs = runs.get(shard, [])
            mine = [i for i, r in enumerate(rs) if r.worker == worker and r.first < t0]
            later = rs[mine[-1] + 1 :] if mine else []
            # A shard another worker delivered before the signal had moved already: not the signal's move.
            after = [r.first for r in later if r.worker != worker]
            if after and later[0].first >= t0:
                out.append(round(min(after) - t0, 3))
    return out


def analyze(
    produced: Iterable[tuple[str, str]],
    deliveries: list[Delivery],
    signals: Mapping[str, float] | None = None,
    owners_at_signal: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """Figures for one scenario: ``produced`` (shard, sequence) records, ``signals`` (worker -> when it was sent
    SIGTERM or SIGKILL), ``owners_at_signal`` (worker -> the shards it delivered last before that)."""
    produced_set = set(produced)
    counts = Counter((d.shard, d.sequence) for d in deliveries)
    twice = [k for k, c in counts.items() if c > 1]
    runs = ownership_runs(deliveries)
    changes = handoff_moves(runs)
    return {
        "produced": len(produced_set),
        "delivered": sum(counts.values()),
        "distinct_delivered": len(counts),
        "lost": len(produced_set - set(counts)),
        "delivered_more_than_once": len(twice),
        "extra_deliveries": sum(counts[k] - 1 for k in twice),
        "concurrent_owner_overlaps": sum(1 for m in changes if m.gap < 0),  # two owners delivered at once
        "moved_shards": len(changes),
        "handoff_gap_s": percentiles([m.gap for m in changes]),
        "zero_cost_gap_s": percentiles(zero_cost_gaps(deliveries)),
        "signal_to_new_owner_first_record_s": percentiles(
            _takeovers(runs, signals or {}, owners_at_signal or {})
        ),
        "moves": [asdict(m) for m in changes],
    }


def handoff_figures(
    deliveries: list[Delivery], kinds: Mapping[str, Kind], milestones: Milestones
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per kind of hand-off: the gaps' percentiles, and each of ``PHASES``'."""
    runs = ownership_runs(deliveries)
    moves, phases = handoff_moves(runs), handoff_phases(runs, milestones)
    gaps, parts = {}, {}
    for name, kind in kinds.items():
        chosen = kind.of(moves)
        gaps[name] = percentiles([m.gap for m in chosen])
        timed = [phases[(m.shard, m.epoch)] for m in chosen if (m.shard, m.epoch) in phases]
        parts[name] = {p: percentiles([t[p] for t in timed]) for p in PHASES}
    return gaps, parts


def _calls(entry: Mapping[str, Any] | None) -> Counter[str]:
    """``table role.operation`` -> DynamoDB calls so far, of one ``worker_stats`` log entry (None: none)."""
    calls = entry["calls"] if entry else {}
    roles = ("lease_table", "checkpoint_table")
    return Counter({f"{role}.{op}": n for role in roles for op, n in calls.get(role, {}).items()})


def dynamodb_cost(
    stats: Mapping[str, list[dict[str, Any]]], shards: int, since_uptime: float = 0.0
) -> dict[str, Any]:
    """DynamoDB calls by type per worker-hour and lease-table writes per shard-hour, from each worker's
    ``worker_stats`` log entries (from its first entry at ``since_uptime`` or later)."""
    calls: Counter[str] = Counter()
    hours = 0.0
    for entries in stats.values():
        base = next((e for e in entries if e["uptime_s"] >= since_uptime), None) if since_uptime else None
        span = entries[-1]["uptime_s"] - (base["uptime_s"] if base else 0.0)
        if span > 0:
            hours += span / 3600
            calls.update(_calls(entries[-1]))
            calls.subtract(_calls(base))
    if hours == 0:
        return {}
    writes = sum(
        calls[f"lease_table.{op}"] for op in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
    )
    return {
        "dynamodb_calls_per_worker_hour": {k: round(v / hours) for k, v in sorted(calls.items())},
        "lease_table_writes_per_shard_hour": round(writes / (hours / len(stats)) / shards, 1),
        "measured_worker_hours": round(hours, 4),
    }
