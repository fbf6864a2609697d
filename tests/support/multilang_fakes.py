"""Stand-ins for what the worker hands a MultiLang processor (its epoch guard and its checkpointer), for unit
tests that drive ``MultiLangProcessor`` and a child process without a worker."""

from __future__ import annotations

from consumer.records import Position

__all__ = ["AlwaysValidGuard", "RecordingCheckpointer"]


class AlwaysValidGuard:
    """An epoch guard whose lease never goes: epoch 1, always valid."""

    epoch = 1

    def is_valid(self) -> bool:
        return True

    def ensure_valid(self) -> None:
        return None


class RecordingCheckpointer:
    """A checkpointer that keeps every position written, in order (``written``)."""

    def __init__(self) -> None:
        self.written: list[Position] = []

    @property
    def last_checkpoint(self) -> Position | None:
        """The last position written, if any."""
        return self.written[-1] if self.written else None

    def checkpoint(self, position: object = None) -> None:
        """Record ``position`` (a ``Position``: the MultiLang processor always gives one)."""
        assert isinstance(position, Position)
        self.written.append(position)
