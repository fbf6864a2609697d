"""A running bill: request units by table and operation, and by second (for peak units per second)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Ledger", "Tally", "Totals", "difference"]


@dataclass
class Tally:
    """Requests and units charged to one (table, operation)."""

    requests: int = 0
    read_units: float = 0.0
    write_units: float = 0.0


Totals = dict[tuple[str, str], Tally]  # (table, operation) -> tally


class Ledger:
    """Charges are stamped with ``clock()`` (simulated or real seconds) and bucketed by whole second."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # the proxy's meter charges from every connection's thread
        self._totals: Totals = defaultdict(Tally)
        self._seconds: dict[tuple[str, int], Tally] = defaultdict(Tally)  # (table, second) -> units

    def charge(self, table: str, op: str, read: float = 0.0, write: float = 0.0, requests: int = 1) -> None:
        """One charge of ``requests`` requests and their units."""
        with self._lock:
            for tally in (self._totals[(table, op)], self._seconds[(table, int(self._clock()))]):
                tally.requests += requests
                tally.read_units += read
                tally.write_units += write

    def totals(self) -> Totals:
        """A copy of the running totals."""
        with self._lock:
            return {k: Tally(t.requests, t.read_units, t.write_units) for k, t in self._totals.items()}

    def peak(self, table: str, start: float, end: float) -> tuple[float, float]:
        """The largest read and write units charged to ``table`` in any whole second of [start, end)."""
        with self._lock:
            rows = [t for (name, s), t in self._seconds.items() if name == table and start <= s < end]
        return max((t.read_units for t in rows), default=0.0), max((t.write_units for t in rows), default=0.0)


def difference(after: Totals, before: Totals) -> Totals:
    """What was charged between two ``totals()`` copies."""
    out: Totals = {}
    for key, t in after.items():
        b = before.get(key, Tally())
        d = Tally(t.requests - b.requests, t.read_units - b.read_units, t.write_units - b.write_units)
        if d.requests or d.read_units or d.write_units:
            out[key] = d
    return out
