"""When the next GetRecords of a shard may start: as fast as AWS allows while the shard is behind, at the idle
pace once it is caught up, and slower after a throttle. A pure decision on times passed in.

AWS's per-shard read limits (Kinesis Data Streams quotas): 5 GetRecords calls a second, and 2 MiB a second of
data read. A single call may return up to 10 MiB; the calls made in the seconds after a large read are
refused until the shard's read budget has refilled. So a reader that is behind paces each call from the
*start* of the previous one by the larger of

- one call's share of the call rate (``1 / reads_per_second``, a little under 5 a second by default, so the
  jitter of arrival times never puts a sixth call into a one-second window), and
- the time the previous call's bytes take to refill at ``read_bytes_per_second`` (just under 2 MiB/s),
  counted from when the call returned (the service may count them when it answers, not when it was asked),

and a reader that is caught up (MillisBehindLatest 0, or fewer records than it asked for when the service
does not say) waits ``idle_interval`` from start to start: the latency it is prepared to add for nothing.

A throttle doubles a slowdown factor on the interval (up to ``max_slowdown``); each call served shrinks it
again, so a reader sharing its shard with another application settles at what is left over.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PaceSettings", "Pacer"]

_RECOVERY = 0.75  # each call served keeps this share of the slowdown above 1


@dataclass(frozen=True)
class PaceSettings:
    """The pace of one shard's reads (see the module's docstring)."""

    idle_interval: float
    reads_per_second: float
    read_bytes_per_second: float
    max_slowdown: float = 8.0

    @property
    def min_interval(self) -> float:
        """The shortest start-to-start interval between two calls."""
        return 1.0 / self.reads_per_second


class Pacer:
    """The start time of the next call, from what the calls so far returned."""

    def __init__(self, settings: PaceSettings) -> None:
        self._s = settings
        self._next = float("-inf")
        self._slowdown = 1.0
        self.behind = True  # until a call says otherwise: a new reader may start on a backlog

    @property
    def next_start(self) -> float:
        """Monotonic time before which the next call must not start."""
        return self._next

    @property
    def slowdown(self) -> float:
        """The factor throttles put on the interval (1.0: none)."""
        return self._slowdown

    def served(
        self,
        started: float,
        ended: float,
        *,
        records: int,
        data_bytes: int,
        limit: int,
        behind_ms: int | None,
    ) -> None:
        """A call that ran from ``started`` to ``ended`` returned ``records`` records of ``data_bytes`` bytes."""
        s = self._s
        self.behind = behind_ms > 0 if behind_ms is not None else records >= limit
        base = s.min_interval if self.behind else max(s.idle_interval, s.min_interval)
        refill = data_bytes / s.read_bytes_per_second
        self._next = max(started + base * self._slowdown, ended + refill)
        self._slowdown = 1.0 + (self._slowdown - 1.0) * _RECOVERY
        if self._slowdown < 1.01:
            self._slowdown = 1.0

    def throttled(self, started: float) -> None:
        """A call that started at ``started`` was refused for exceeding a limit."""
        s = self._s
        self._slowdown = min(s.max_slowdown, self._slowdown * 2.0)
        self._next = max(self._next, started + s.min_interval * self._slowdown)

    def failed(self, started: float) -> None:
        """A call that started at ``started`` failed otherwise: the next keeps the call rate."""
        self._next = max(self._next, started + self._s.min_interval)
