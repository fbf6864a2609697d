"""The ``LeaseGuard`` of one ownership: valid while not lost and our heartbeat window is open."""

from __future__ import annotations

import threading

from consumer.errors import LeaseLostError
from consumer.leases.liveness import OwnValidity

__all__ = ["ShardGuard"]


class ShardGuard:
    """One ownership's guard: lost once the lease is known gone; invalid while our heartbeat window is shut."""

    def __init__(self, epoch: int, validity: OwnValidity) -> None:
        self._epoch = epoch
        self._validity = validity
        self.lost = threading.Event()
        self._over = False  # ``mark_ended``: this ownership is over, whoever holds the lease now

    @property
    def epoch(self) -> int:
        return self._epoch

    def is_valid(self) -> bool:
        return not self.lost.is_set() and self._validity.valid()

    def remaining(self) -> float:
        """Seconds until our window closes (on our monotonic clock); 0 once lost or closed."""
        if self.lost.is_set():
            return 0.0
        return max(0.0, self._validity.remaining())

    @property
    def lapses(self) -> int:
        """``OwnValidity.lapses``: changes when the window closed and opened again."""
        return self._validity.lapses

    @property
    def window(self) -> float:
        """The longest the window can be: ``lease_duration - safety_margin`` from a heartbeat's send."""
        return self._validity.window

    def ensure_valid(self) -> None:
        if self.lost.is_set():
            if self._over:
                raise LeaseLostError(
                    f"this ownership has ended (epoch {self._epoch}): the shard was handed over, released, "
                    "ended or halted, and is no longer processed here"
                )
            raise LeaseLostError(f"lease lost (epoch {self._epoch})")
        if not self._validity.valid():
            raise LeaseLostError(
                f"lease validity lapsed (epoch {self._epoch}): heartbeat not renewed in time"
            )

    def mark_lost(self) -> None:
        """The lease is known to be gone."""
        self.lost.set()

    def mark_ended(self) -> None:
        """The shard's consumption under this ownership is over (before the lease is handed over or released):
        from now on the guard is invalid, so that work the processor left running cannot pass for the owner's."""
        self._over = not self.lost.is_set()
        self.lost.set()
