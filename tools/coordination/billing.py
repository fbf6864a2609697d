"""DynamoDB on-demand billing rules, as pure functions of the items a request touches.

Item size: the sum over attributes of the name's UTF-8 bytes plus the value's size: a string its UTF-8
bytes; a number one byte per two significant digits (leading and trailing zeros trimmed) plus one; a binary
its raw bytes; a boolean or null one byte; a list or map 3 bytes plus, per element, one byte and the
element's size (a map element also its name); a set the sum of its members' sizes.

Units: a read is billed in 4 KB units of the item read (strongly consistent: 1 per unit; eventually
consistent: half), a missing item still costs the minimum; GetItem and every BatchGetItem item are rounded up
separately, a Query or Scan page sums the sizes of the items it read and rounds once. A write is billed in
1 KB units of the larger of the item before and after (a delete: the deleted item; a write whose condition
failed: the same units, it still consumed them). In a transaction every item costs twice its units, and a
ConditionCheck is billed like a write of the item it checks.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "HOURS_PER_MONTH",
    "READ_PRICE",
    "WRITE_PRICE",
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
READ_UNIT_BYTES = 4096
WRITE_UNIT_BYTES = 1024


def number_size(text: str) -> int:
    """One byte per two significant digits, plus one."""
    try:
        number = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"not a DynamoDB number: {text!r}") from exc
    if number.is_zero():
        return 1
    significant = len(number.normalize().as_tuple().digits)  # normalize() trims the trailing zeros
    return math.ceil(significant / 2) + 1


def _binary_len(value: Any) -> int:
    # boto3 passes raw bytes; the JSON wire format (the proxy) carries base64 text.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return len(base64.b64decode(value))


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's wire form ({"S": "x"}, {"N": "1"}, ...), name excluded."""
    ((kind, v),) = value.items()
    if kind == "S":
        return len(v.encode())
    if kind == "N":
        return number_size(v)
    if kind == "B":
        return _binary_len(v)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode()) for s in v)
    if kind == "NS":
        return sum(number_size(n) for n in v)
    if kind == "BS":
        return sum(_binary_len(b) for b in v)
    if kind == "L":
        return 3 + sum(1 + value_size(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_size(e) for k, e in v.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]] | None) -> int:
    """Bytes of an item (0 for a missing one)."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(v) for name, v in item.items())


def read_units(size: int, consistent: bool) -> float:
    """Units of reading one item (or one Query/Scan page) of ``size`` bytes; the minimum when it is 0."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2


def page_read_units(sizes: list[int] | tuple[int, ...], consistent: bool) -> float:
    """A Query or Scan page: the sizes of every item read are summed, then rounded up once."""
    return read_units(sum(sizes), consistent)


def write_units(before: int, after: int = 0) -> int:
    """Units of a write: 1 KB units of the larger of the item before and after (at least one)."""
    return max(1, math.ceil(max(before, after) / WRITE_UNIT_BYTES))


def dollars_per_month(read_units_per_hour: float, write_units_per_hour: float) -> float:
    return (read_units_per_hour * READ_PRICE + write_units_per_hour * WRITE_PRICE) * HOURS_PER_MONTH
