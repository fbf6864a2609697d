"""Hour ranges given as ``YYYY-MM-DDTHH`` and the partition paths they cover (pure Python)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["HOUR_FORMAT", "MAX_HOURS", "hour_range", "parse_hour", "partition_dirs"]

HOUR_FORMAT = "%Y-%m-%dT%H"
_HOUR = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}")
#: A guard against a typo that asks for years of data: 93 days.
MAX_HOURS = 24 * 93


def parse_hour(text: str) -> datetime:
    """``2026-11-21T05`` -> 2026-11-21 05:00 UTC; anything else raises ``ValueError`` naming the format."""
    message = f"hour {text!r} must look like YYYY-MM-DDTHH (UTC), e.g. 2026-11-21T05"
    if not _HOUR.fullmatch(text):  # strptime alone takes T5 for T05, and other near misses
        raise ValueError(message)
    try:
        return datetime.strptime(text, HOUR_FORMAT).replace(tzinfo=UTC)
    except ValueError as err:
        raise ValueError(message) from err


def hour_range(start: str, end: str) -> list[datetime]:
    """Every hour from ``start`` to ``end``, both included."""
    first, last = parse_hour(start), parse_hour(end)
    if last < first:
        raise ValueError(f"--end {end} is before --start {start}")
    count = int((last - first) / timedelta(hours=1)) + 1
    if count > MAX_HOURS:
        raise ValueError(f"{count} hours requested; at most {MAX_HOURS} per run")
    return [first + timedelta(hours=i) for i in range(count)]


def partition_dirs(hours: list[datetime]) -> list[tuple[str, str]]:
    """``(date, hour)`` partition values (``2026-11-21``, ``05``) of each hour."""
    return [(h.strftime("%Y-%m-%d"), h.strftime("%H")) for h in hours]
