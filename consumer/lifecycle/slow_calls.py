"""A processor call that does not return: told once, with the stack it is stuck in.

A processor callback that hangs (a socket without a timeout, a lock never released) holds its shard for
good, and nothing else sees it: the heartbeats go on, so the lease stays, the health check passes, and the
shard's lag is no longer observed (no ``MillisBehindLatest`` is sent for it). That is so for every callback:
``process_records``, and also ``initialize`` (the shard never starts reading), ``shutdown_requested`` (a
hand-off or a stop waits for it), ``shard_ended`` and ``lease_lost``. The worker's metrics flush asks
:class:`SlowCallWatch` about the calls under way: each one running longer than the bound is logged once
(``processor_call_slow``, WARNING: stream, shard, epoch, the callback, how long, and the thread's stack) and
counted in the ``ProcessorCallsSlow`` gauge (per stream, every flush) until it returns.

``ShardWork`` notes the calls it makes itself; ``initialize`` is called inside ``shard_start.start_shard``,
through the ``ProcessorAdapter``, which asks :func:`watched` for the watch its thread has in place
(:func:`watching_calls`).
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

from consumer.logs import log_event

__all__ = ["ProcessorCall", "SlowCallWatch", "watched", "watching_calls"]

logger = logging.getLogger(__name__)

#: A callback's name -> the context its call runs in (e.g. ``ShardWork.watched``).
Watch = Callable[[str], AbstractContextManager[object]]

_local = threading.local()  # .watch: the Watch of the calls made on this thread, if any


@dataclass(frozen=True)
class ProcessorCall:
    """A processor call under way: on which shard, since when (monotonic), on which thread, and which
    callback (``process_records``, ``initialize``, ``shutdown_requested``, ``shard_ended``, ``lease_lost``)."""

    stream: str
    shard_id: str
    epoch: int
    started: float
    thread: int
    callback: str = "process_records"


@contextmanager
def watching_calls(watch: Watch) -> Iterator[None]:
    """Meanwhile, the processor callbacks called on this thread through the ``ProcessorAdapter`` run in
    ``watch(callback)`` (for a call made out of the caller's reach: ``initialize``, inside ``start_shard``)."""
    before = getattr(_local, "watch", None)
    _local.watch = watch
    try:
        yield
    finally:
        _local.watch = before


def watched(callback: str) -> AbstractContextManager[object]:
    """The context a call of ``callback`` on this thread runs in: the watch ``watching_calls`` put in place,
    else none."""
    watch: Watch | None = getattr(_local, "watch", None)
    return watch(callback) if watch is not None else nullcontext()


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
                callback=call.callback,
                running_s=round(now - call.started, 1),
                bound_s=self.bound,
                hint=f"{call.callback} has not returned: the shard reads nothing until it does, and a "
                "hand-off or shutdown waits for it",
                stack="".join(traceback.format_stack(frame)) if frame is not None else None,
            )
        self._told = set(slow)  # a call that returned is forgotten
        counts: dict[str, int] = {}
        for call in slow:
            counts[call.stream] = counts.get(call.stream, 0) + 1
        return counts
