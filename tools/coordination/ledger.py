"""A running bill: request units by table and operation, and by second (for peak units per second)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Ledger", "Tally", "Totals", "difference", "peak_per_second"]


@dataclass
class Tally:
    requests: int = 0
    read_units: float = 0.0
    write_units: float = 0.0


Totals = dict[tuple[str, str], Tally]  # (table, operation) -> tally


class Ledger:
    """Charges are stamped with ``clock()`` (simulated or real seconds) and bucketed by whole second."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._totals: Totals = defaultdict(Tally)
        # table -> second -> [read units, write units]
        self._seconds: dict[str, dict[int, list[float]]] = defaultdict(
            lambda: defaultdict(lambda: [0.0, 0.0])
        )

    def charge(self, table: str, op: str, read: float = 0.0, write: float = 0.0, requests: int = 1) -> None:
        second = int(self._clock() // 1)
        with self._lock:
            tally = self._totals[(table, op)]
            tally.requests += requests
            tally.read_units += read
            tally.write_units += write
            bucket = self._seconds[table][second]
            bucket[0] += read
            bucket[1] += write

    def totals(self) -> Totals:
        """A copy of the running totals."""
        with self._lock:
            return {k: Tally(t.requests, t.read_units, t.write_units) for k, t in self._totals.items()}

    def seconds(self, table: str) -> dict[int, tuple[float, float]]:
        with self._lock:
            return {s: (r, w) for s, (r, w) in self._seconds.get(table, {}).items()}

    def tables(self) -> list[str]:
        with self._lock:
            return sorted({t for t, _ in self._totals})


def difference(after: Mapping[tuple[str, str], Tally], before: Mapping[tuple[str, str], Tally]) -> Totals:
    """What was charged between two ``totals()`` copies."""
    out: Totals = {}
    for key, t in after.items():
        b = before.get(key, Tally())
        d = Tally(t.requests - b.requests, t.read_units - b.read_units, t.write_units - b.write_units)
        if d.requests or d.read_units or d.write_units:
            out[key] = d
    return out


def peak_per_second(ledger: Ledger, table: str, start: float, end: float) -> tuple[float, float]:
    """The largest read and write units charged to ``table`` in any whole second of [start, end)."""
    rows = [rw for s, rw in ledger.seconds(table).items() if start <= s < end]
    return (max((r for r, _ in rows), default=0.0), max((w for _, w in rows), default=0.0))
