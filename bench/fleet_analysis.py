"""Pure analysis of a fleet run: losses, duplicates, ownership runs, hand-off gaps, failover times."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Delivery", "Run", "analyze", "ownership_runs", "percentiles"]


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


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    s = sorted(values)
    p99 = s[min(len(s) - 1, max(0, round(0.99 * (len(s) - 1))))]
    return {"n": len(s), "p50": round(statistics.median(s), 3), "p99": round(p99, 3), "max": round(s[-1], 3)}


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
    gaps: list[float] = []
    moves: list[dict[str, Any]] = []
    overlaps = 0
    for shard, rs in runs.items():
        for a, b in itertools.pairwise(rs):
            if a.worker == b.worker:
                continue
            gap = b.first - a.last
            if gap < 0:
                overlaps += 1  # two workers delivered this shard at the same time
            gaps.append(gap)
            moves.append(
                {
                    "shard": shard,
                    "from": a.worker,
                    "to": b.worker,
                    "epoch": b.epoch,
                    "at": round(b.first, 3),
                    "gap_s": round(gap, 3),
                }
            )
    takeover: dict[str, float] = {}
    for worker, t0 in (signals or {}).items():
        for shard in (owners_at_signal or {}).get(worker, []):
            after = [r.first for r in runs.get(shard, []) if r.worker != worker and r.first >= t0]
            if after:
                takeover[shard] = round(min(after) - t0, 3)
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
        "signal_to_new_owner_first_record_s": percentiles(list(takeover.values())),
        "moves": moves,
    }
