"""The worker's record of what each of its shard loops last read: filled by the loops, one call per fetch
result they take, and published by the heartbeat lane with every heartbeat (so ``status`` shows lag without
a single Kinesis call of its own).

Keys are lease keys (a worker may consume several streams, whose shard ids repeat); the loop of a shard calls
``read`` for every fetch it takes, the worker ``forget``s the shard when its loop has finished, and the lane
takes a ``snapshot`` for each heartbeat.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from consumer.clock import Clock, SystemClock
from consumer.leases.model import Lease
from consumer.leases.progress import MAX_PUBLISHED, ShardLag
from consumer.records import Position

__all__ = ["ShardProgress"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Seen:
    stream: str
    shard_id: str
    millis_behind_latest: int | None
    last_sequence: str | None
    at: float  # the worker's monotonic clock


class ShardProgress:
    """Thread-safe: the shard loops write, the heartbeat lane reads, the worker forgets."""

    def __init__(self, clock: Clock | None = None, *, limit: int = MAX_PUBLISHED) -> None:
        """``limit``: at most this many shards in a snapshot (the most behind first)."""
        self._clock = clock or SystemClock()
        self._limit = limit
        self._lock = threading.Lock()
        self._seen: dict[str, _Seen] = {}

    def read(self, lease: Lease, millis_behind_latest: int | None, last: Position | None) -> None:
        """A fetch result was taken for ``lease``'s shard: its ``MillisBehindLatest`` and the position of the
        last record read so far (or where the reading started, when none was read yet)."""
        seen = _Seen(
            lease.stream,
            lease.shard_id,
            millis_behind_latest,
            None if last is None else last.sequence,
            self._clock.monotonic(),
        )
        with self._lock:
            self._seen[lease.key] = seen

    def forget(self, key: str) -> None:
        """The shard with this lease key is no longer read here (its loop has finished)."""
        with self._lock:
            self._seen.pop(key, None)

    def snapshot(self) -> dict[tuple[str, str], ShardLag]:
        """``{(stream, shard_id): ShardLag}`` with each observation's age now, at most ``limit`` shards
        (the most behind first: a worker past the limit still shows where it is late)."""
        now = self._clock.monotonic()
        with self._lock:
            seen = list(self._seen.values())
        if len(seen) > self._limit:
            seen.sort(key=lambda s: -1 if s.millis_behind_latest is None else s.millis_behind_latest)
            seen = seen[-self._limit :]
        return {
            (s.stream, s.shard_id): ShardLag(
                s.millis_behind_latest, s.last_sequence, max(0, round((now - s.at) * 1000))
            )
            for s in seen
        }

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)
