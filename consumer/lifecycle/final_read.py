"""When a shutting-down worker may end: once nothing can have been handed to it unseen.

A leader that has not yet seen the worker draining may still hand it a lease. The worker's heartbeat sent after
the shutdown began carries ``draining``; once one such heartbeat has landed, no transfer to the worker passes
(docs/protocol.md, "Scale-in"), so one consistent read of its own item then shows everything ever handed to it.
The shutdown ends when that read finds nothing given, once the worker holds nothing (``settled``).
"""

from __future__ import annotations

import enum

from consumer.lifecycle.messages import HeartbeatResult, InboxRead, Result

__all__ = ["FinalRead"]


class _Read(enum.Enum):
    NONE = "none"  # not sent (or sent again: keys were given and are being handed on)
    SENT = "sent"  # awaiting its answer
    CHECKED = "checked"  # nothing given, or DynamoDB does not answer: nothing can be handed either


class FinalRead:
    """The wait for the final read of the worker's own item (pure: fed the coordinator's events)."""

    def __init__(self) -> None:
        self._since = float("inf")  # when the shutdown began (monotonic)
        self._landed = False
        self._read = _Read.NONE

    def begin(self, now: float) -> None:
        """The shutdown began at ``now``: heartbeats sent from then on carry ``draining``."""
        self._since = now

    def heard(self, ev: HeartbeatResult) -> None:
        """A heartbeat's result. One sent since the shutdown began that landed with ``draining`` lets the read
        go (a beat the lane took up just before, without it, does not); one that failed means DynamoDB does
        not answer, so nothing can be read nor handed on either: the wait ends without the read."""
        if ev.sent_at < self._since:
            return
        if ev.result is Result.OK:
            self._landed |= ev.draining
        else:
            self._read = _Read.CHECKED

    def answered(self, ev: InboxRead) -> None:
        """The final read's answer: nothing given to us (or no answer: see ``heard``) ends the wait; keys given
        are read and handed on like any lease received while shutting down, then read again."""
        self._read = _Read.CHECKED if ev.worker is None or not ev.worker.given else _Read.NONE

    def due(self, settled: bool) -> tuple[bool, bool]:
        """With the worker ``settled`` (it holds nothing and no read of its leases is due or out): whether to
        send the final read now, and whether the shutdown may end."""
        if not settled:
            return False, False
        if self._landed and self._read is _Read.NONE:
            self._read = _Read.SENT
            return True, False
        return False, self._read is _Read.CHECKED
