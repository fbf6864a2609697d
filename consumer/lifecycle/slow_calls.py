"""A processor call that does not return: told once, with the stack it is stuck in.

A ``process_records`` that hangs (a socket without a timeout, a lock never released) holds its shard for
good, and nothing else sees it: the heartbeats go on, so the lease stays, the health check passes, and the
shard's lag is no longer observed (no ``MillisBehindLatest`` is sent for it). The worker's metrics flush asks
:class:`SlowCallWatch` about the calls under way: each one running longer than the bound is logged once
(``processor_call_slow``, WARNING: stream, shard, epoch, how long, and the thread's stack) and counted in the
``ProcessorCallsSlow`` gauge (per stream, every flush) until it returns.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from consumer.logs import log_event

__all__ = ["ProcessorCall", "SlowCallWatch"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessorCall:
    """A processor call under way: on which shard, since when (monotonic) and on which thread."""

    stream: str
    shard_id: str
    epoch: int
    started: float
    thread: int


class SlowCallWatch:
    """Tells each call running longer than ``bound`` seconds once; see the module's docstring."""

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self._told: set[ProcessorCall] = set()

    def check(self, now: float, calls: Iterable[ProcessorCall]) -> dict[str, int]:
        """Log each call past the bound not yet told; returns the number of calls past it per stream."""
        slow = [c for c in calls if now - c.started > self.bound]
        frames = sys._current_frames() if any(c not in self._told for c in slow) else {}
        for call in slow:
            if call in self._told:
                continue
            frame = frames.get(call.thread)
            log_event(
                logger,
                "processor_call_slow",
                logging.WARNING,
                stream=call.stream,
                shard=call.shard_id,
                epoch=call.epoch,
                running_s=round(now - call.started, 1),
                bound_s=self.bound,
                hint="process_records has not returned: the shard reads nothing until it does, and a "
                "hand-off or shutdown waits for it",
                stack="".join(traceback.format_stack(frame)) if frame is not None else None,
            )
        self._told = set(slow)  # a call that returned is forgotten
        counts: dict[str, int] = {}
        for call in slow:
            counts[call.stream] = counts.get(call.stream, 0) + 1
        return counts
