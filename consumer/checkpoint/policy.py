"""When a shard's checkpoint advances: after each delivered batch (auto) or over records the processor
marked done, in order (manual). The shard loop asks the policy and never branches on the mode itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from consumer.checkpoint.checkpointer import CheckpointWriter, OrderedTracker
from consumer.clock import Clock
from consumer.records import Position, Record

__all__ = ["AutoCheckpoints", "CheckpointPolicy", "ExplicitCheckpoints", "ManualCheckpoints"]


class CheckpointPolicy(Protocol):
    def track(self, batch: Sequence[Record]) -> Sequence[Record]:
        """The records to deliver (manual mode gives each a ``done()``)."""
        ...

    def delivered(self, batch: Sequence[Record], dead_lettered: Sequence[Record]) -> None: ...

    def halted(self, batch: Sequence[Record], failed: Record | None, dead_lettered: Sequence[Record]) -> None:
        """The shard halts at ``failed``: what came before it may still be checkpointed."""
        ...

    def position(self) -> Position | None:
        """What a checkpoint with no argument saves: everything delivered (auto) or done (manual)."""
        ...

    def save_due(self, writer: CheckpointWriter, idle: bool) -> None:
        """Write the checkpoint if it is due (may raise ``TransientError``; the loop retries)."""
        ...

    @property
    def pending(self) -> int: ...

    def close(self) -> None: ...


class AutoCheckpoints:
    def __init__(self, start: Position | None, interval: float, clock: Clock) -> None:
        self._processed = start
        self._interval = interval
        self._clock = clock
        self._last = clock.monotonic()

    def track(self, batch: Sequence[Record]) -> Sequence[Record]:
        return batch

    def delivered(self, batch: Sequence[Record], dead_lettered: Sequence[Record]) -> None:
        self._processed = batch[-1].position

    def halted(self, batch: Sequence[Record], failed: Record | None, dead_lettered: Sequence[Record]) -> None:
        before = [r for r in batch if failed is not None and r.position < failed.position]
        if before:
            self._processed = before[-1].position

    def position(self) -> Position | None:
        return self._processed

    def save_due(self, writer: CheckpointWriter, idle: bool) -> None:
        now = self._clock.monotonic()
        if (
            self._processed is not None
            and self._processed != writer.last
            and now - self._last >= self._interval
        ):
            writer.write(self._processed)
            self._last = now

    @property
    def pending(self) -> int:
        return 0

    def close(self) -> None:
        return None


class ManualCheckpoints:
    def __init__(self, flush_interval: float, clock: Clock) -> None:
        self._tracker = OrderedTracker()
        self._interval = flush_interval
        self._clock = clock
        self._last = clock.monotonic()

    def track(self, batch: Sequence[Record]) -> Sequence[Record]:
        return self._tracker.track(batch)

    def delivered(self, batch: Sequence[Record], dead_lettered: Sequence[Record]) -> None:
        for record in dead_lettered:
            record.done()

    def halted(self, batch: Sequence[Record], failed: Record | None, dead_lettered: Sequence[Record]) -> None:
        self.delivered(batch, dead_lettered)  # the watermark itself stops before the failing record

    def position(self) -> Position | None:
        return self._tracker.watermark

    def save_due(self, writer: CheckpointWriter, idle: bool) -> None:
        now = self._clock.monotonic()
        if (idle or now - self._last >= self._interval) and (mark := self._tracker.watermark) is not None:
            writer.write(mark)
            self._last = now

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` whenever records marked done advance the watermark (it wakes the shard)."""
        self._tracker.listen(listener)

    @property
    def pending(self) -> int:
        return self._tracker.pending

    def close(self) -> None:
        self._tracker.close()


class ExplicitCheckpoints:
    """``checkpoint_mode = "explicit"``: only the processor's own ``checkpoint(position)`` calls write.

    Nothing is written after a batch, at a requested stop or on a timer, and nothing is waited for: the
    processor answers for every position it checkpoints (the MultiLang daemon writes exactly what its child
    asks for). ``checkpoint()`` without a position writes nothing, except in ``shard_ended`` (SHARD_END)."""

    def track(self, batch: Sequence[Record]) -> Sequence[Record]:
        return batch

    def delivered(self, batch: Sequence[Record], dead_lettered: Sequence[Record]) -> None:
        return None

    def halted(self, batch: Sequence[Record], failed: Record | None, dead_lettered: Sequence[Record]) -> None:
        return None

    def position(self) -> Position | None:
        return None

    def save_due(self, writer: CheckpointWriter, idle: bool) -> None:
        return None

    @property
    def pending(self) -> int:
        return 0

    def close(self) -> None:
        return None
