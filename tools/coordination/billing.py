"""DynamoDB on-demand billing rules, as pure functions of the items a request touches, and a ``Ledger`` of the
running bill (units by table and operation, and by second for the peaks)."""

from __future__ import annotations

import base64
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "Ledger",
    "Tally",
    "Totals",
    "difference",
    "dollars_per_month",
    "item_size",
    "number_size",
    "page_read_units",
    "read_units",
    "value_size",
    "write_units",
]

READ_PRICE = 0.125 / 1_000_000  # $ per read request unit (on-demand)
WRITE_PRICE = 0.625 / 1_000_000  # $ per write request unit (on-demand)
HOURS_PER_MONTH = 730.0


def number_size(text: str) -> int:
    """One byte per two significant digits, plus one."""
    number = Decimal(text)
    if number.is_zero():
        return 1
    significant = len(number.normalize().as_tuple().digits)  # normalize() trims the trailing zeros
    return math.ceil(significant / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's wire form ({"S": "x"}, {"N": "1"}, ...), name excluded."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return number_size(v)
    if kind == "B":  # boto3 passes raw bytes; the JSON wire form (the proxy) carries base64 text
        return len(v) if isinstance(v, (bytes, bytearray, memoryview)) else len(base64.b64decode(v))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(value_size({kind[0]: member}) for member in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item (0 for a missing one)."""
    return sum(len(name.encode()) + value_size(v) for name, v in (item or {}).items())


def read_units(size: int, consistent: bool, transactional: bool = False) -> float:
    """Units of reading one item (or one Query/Scan page) of ``size`` bytes; the minimum when it is 0 (1 per
    4 KB; half when eventually consistent; 2x in a transaction)."""
    units = max(1, math.ceil(size / 4096))
    return 2.0 * units if transactional else float(units) if consistent else units / 2


def page_read_units(sizes: list[int], consistent: bool) -> float:
    """A Query or Scan page: the sizes of every item read are summed, then rounded up once."""
    return read_units(sum(sizes), consistent)


def write_units(before: int, after: int = 0) -> int:
    """Units of a write: 1 KB units of the larger of the item before and after (at least one)."""
    return max(1, math.ceil(max(before, after) / 1024))


def dollars_per_month(read_units_per_hour: float, write_units_per_hour: float) -> float:
    """The monthly on-demand bill of these hourly units."""
    return (read_units_per_hour * READ_PRICE + write_units_per_hour * WRITE_PRICE) * HOURS_PER_MONTH


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

    def charge_write(self, op: str, items: list[tuple[str, int, int]]) -> None:
        """One write request touching ``items`` (table, size before, size after), billed on its first item; a
        transaction bills each item twice."""
        factor = 2 if op == "TransactWriteItems" else 1
        for i, (table, before, after) in enumerate(items):
            self.charge(table, op, write=factor * write_units(before, after), requests=int(i == 0))

    def totals(self) -> Totals:
        """A copy of the running totals."""
        with self._lock:
            return {k: Tally(t.requests, t.read_units, t.write_units) for k, t in self._totals.items()}

    def peak(self, table: str, start: float, end: float) -> dict[str, float]:
        """The largest read and write units charged to ``table`` (the lease table) in any whole second of
        [start, end)."""
        with self._lock:
            rows = [t for (name, s), t in self._seconds.items() if name == table and start <= s < end]
        return {
            "lease_table_read_units_per_s": max((t.read_units for t in rows), default=0.0),
            "lease_table_write_units_per_s": max((t.write_units for t in rows), default=0.0),
        }


def difference(after: Totals, before: Totals) -> Totals:
    """What was charged between two ``totals()`` copies."""
    out: Totals = {}
    for key, t in after.items():
        b = before.get(key, Tally())
        d = Tally(t.requests - b.requests, t.read_units - b.read_units, t.write_units - b.write_units)
        if d.requests or d.read_units or d.write_units:
            out[key] = d
    return out
