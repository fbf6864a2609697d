"""What a shard's checkpoint would save: what was delivered (auto), the records the processor marked done, in
order (manual), or only what the processor checkpoints itself (explicit). When it is saved is the shard
machine's decision (``consumer/lifecycle/shard_decide.py``, from ``checkpoint.auto_interval`` and
``flush_interval``); the shell tells it the mode from the policy (``AnyPolicy``, matched in ``shard_work``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeAlias

from consumer.checkpoint.checkpointer import OrderedTracker
from consumer.records import Position, Record

__all__ = ["AnyPolicy", "AutoCheckpoints", "CheckpointPolicy", "ExplicitCheckpoints", "ManualCheckpoints"]


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

    @property
    def pending(self) -> int: ...

    def close(self) -> None: ...


class AutoCheckpoints:
    def __init__(self, start: Position | None) -> None:
        self._processed = start

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

    @property
    def pending(self) -> int:
        return 0

    def close(self) -> None:
        return None


class ManualCheckpoints:
    def __init__(self) -> None:
        self._tracker = OrderedTracker()

    def track(self, batch: Sequence[Record]) -> Sequence[Record]:
        return self._tracker.track(batch)

    def delivered(self, batch: Sequence[Record], dead_lettered: Sequence[Record]) -> None:
        for record in dead_lettered:
            record.done()

    def halted(self, batch: Sequence[Record], failed: Record | None, dead_lettered: Sequence[Record]) -> None:
        self.delivered(batch, dead_lettered)  # the watermark itself stops before the failing record

    def position(self) -> Position | None:
        return self._tracker.watermark

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

    @property
    def pending(self) -> int:
        return 0

    def close(self) -> None:
        return None


#: Every policy there is: the shell matches on it to tell the machine its mode (a new one must be named there).
AnyPolicy: TypeAlias = AutoCheckpoints | ManualCheckpoints | ExplicitCheckpoints
