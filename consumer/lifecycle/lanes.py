"""The calls that must not wait behind the coordinator's: heartbeats on a lane of their own, and slow calls
(discovery's ListShards and lease creation) on a background lane.

The coordinator runs its actions one at a time on its own thread; one slow call there (a held ListShards, a
black-holed scan) used to delay the next heartbeat past the window it was meant to renew, and every shard
suspended. Now:

- ``HeartbeatLane`` sends the heartbeats itself, on a thread with its own client (short timeouts, no
  retries under ours), every ``heartbeat_every`` after the last good one's send, with the generation, lease
  count and draining flag the coordinator last asked for, and what the shard loops last read (``progress``:
  each shard's MillisBehindLatest and last sequence number, published in the same write for ``status``). A
  good heartbeat extends our validity at once (by its send time: what was acknowledged, no more) and is
  reported to the coordinator as before; a fenced one stops the lane until the coordinator, reconciled, asks
  again; one that retrying cannot fix (``retry.verdict``) stops it for good and ends the worker.
- ``BackgroundLane`` runs one slow call at a time and reports its event when it ends; the coordinator counts
  the next discovery from then.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

from consumer.clock import Clock
from consumer.errors import ThrottledError, UnreachableError, WorkerFencedError
from consumer.leases.liveness import OwnValidity
from consumer.leases.repository import MembershipRepository
from consumer.lifecycle.messages import Event, HeartbeatResult, Result
from consumer.lifecycle.progress import ShardProgress
from consumer.lifecycle.retry import Verdict, verdict
from consumer.logs import log_event

__all__ = ["BackgroundLane", "HeartbeatLane", "HeartbeatParams"]

logger = logging.getLogger(__name__)

_LONGEST_WAIT = 0.5  # seconds the lane sleeps at most between looks at its schedule (a fake clock stands)


@dataclass(frozen=True)
class HeartbeatParams:
    """What a heartbeat writes and is conditional on."""

    generation: int
    lease_count: int
    draining: bool
    gone: frozenset[str] = frozenset()  # a leader's: the streams Kinesis says are gone


class HeartbeatLane:
    """Heartbeats on a thread of their own; see the module's docstring."""

    def __init__(
        self,
        worker_id: str,
        repo: MembershipRepository,
        validity: OwnValidity,
        clock: Clock,
        every: float,
        retry: float,
        report: Callable[[Event], None],
        lapsed_every: float = float("inf"),
        progress: ShardProgress | None = None,
        failed: Callable[[Exception], None] = lambda exc: None,
    ) -> None:
        """``retry``: the pause after a failed heartbeat while our window is open; ``lapsed_every``: the
        pause once it has closed (more than a lease duration: see ``_after_failure``); ``progress``: the
        shards' progress, a snapshot of which each heartbeat publishes (None: the item's is left as is);
        ``failed``: told each failed beat's error (the worker counts throttles)."""
        self._told_failure = failed
        self._id = worker_id
        self._progress = progress
        self._lapsed_every = lapsed_every
        self._lapsed = False
        self._repo = repo
        self._validity = validity
        self._clock = clock
        self._every = every
        self._retry = retry
        self._report = report
        self._cond = threading.Condition()
        self._params: HeartbeatParams | None = None
        self._asked = False  # the coordinator asked for a heartbeat now
        self._fenced_at: int | None = None  # the generation a heartbeat was fenced on: wait for a new one
        self._next_at = float("inf")
        self._in_flight = False
        self._stopped = False
        self._error: Exception | None = None  # what stopped the lane for good (raised by ``request``)
        self._thread = threading.Thread(target=self._main, name=f"heartbeat-{worker_id}", daemon=True)

    def start(self) -> None:
        """Start the lane's thread (it beats once asked the first time)."""
        self._thread.start()

    def request(self, params: HeartbeatParams) -> None:
        """The coordinator's ``Heartbeat``: the lane beats with ``params`` from now on, at once when it has
        no schedule yet, after a fence, or when the generation, the draining flag or a leader's gone streams
        changed (a new lease count waits for the next beat); otherwise on its own schedule (no double writes). Raises the error
        that stopped the lane, if one did (see ``_failed``)."""
        with self._cond:
            if self._error is not None:
                raise self._error
            old = self._params
            urgent = (
                old is None
                or self._fenced_at is not None
                or (old.generation, old.draining, old.gone)
                != (params.generation, params.draining, params.gone)
            )
            self._fenced_at = None
            self._params = params
            if urgent or (not self._in_flight and self._next_at == float("inf")):
                self._asked = True
                self._cond.notify()

    def stop(self, timeout: float = 0.0) -> None:
        """No heartbeat starts after this; wait up to ``timeout`` for one under way."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if timeout > 0 and self._thread.ident is not None:
            self._thread.join(timeout)

    def _next(self) -> HeartbeatParams | None:
        with self._cond:
            while not self._stopped:
                now = self._clock.monotonic()
                ready = self._params is not None and self._fenced_at is None
                if ready and (self._asked or now >= self._next_at):
                    self._asked, self._in_flight = False, True
                    self._next_at = float("inf")  # set again by the result
                    return self._params
                wait = _LONGEST_WAIT if not ready else min(_LONGEST_WAIT, max(0.0, self._next_at - now))
                self._cond.wait(wait)
            return None

    def _main(self) -> None:
        while (params := self._next()) is not None:
            sent = self._clock.monotonic()
            try:
                self._beat(params)
            except WorkerFencedError:
                with self._cond:
                    self._fenced_at, self._in_flight = params.generation, False
                self._report(HeartbeatResult(sent, Result.CONFLICT, fenced=True))
                continue
            except Exception as exc:  # the one verdict decides: a missed beat (the window decides), or fatal
                self._failed(sent, exc)
                continue
            self._lapsed = False
            self._validity.extend(sent)  # at once: the coordinator may be busy in a slow call
            with self._cond:
                self._next_at, self._in_flight = sent + self._every, False
            self._report(HeartbeatResult(sent, Result.OK, draining=params.draining))

    def _failed(self, sent: float, exc: Exception) -> None:
        """A beat that may pass is tried again (``_after_failure``). One that cannot (a bug, a validation
        error, a missing table, rejected credentials) would fail the same way for ever while our leases
        lapse unseen: the lane stops, and the coordinator's next request raises it, which ends the worker
        (``join()`` re-raises it) so that it is restarted, or fixed, instead of idling."""
        self._told_failure(exc)
        fatal = verdict(exc) is Verdict.SURFACE
        with self._cond:
            self._in_flight = False
            if fatal:
                self._error, self._stopped = exc, True
            else:
                self._next_at = sent + self._after_failure(exc)
        if fatal:
            logger.error(
                "heartbeat failed for good",
                exc_info=exc,
                extra={"event": "heartbeat_lane_failed", "worker": self._id, "error": repr(exc)},
            )
        kind = "fatal" if fatal else "transient"
        self._report(HeartbeatResult(sent, Result.FAILED, error=f"{kind}: {exc!r}"))

    def _beat(self, params: HeartbeatParams) -> None:
        args = (self._id, params.generation, params.lease_count, params.draining)
        if self._progress is None:  # no registry: the stored progress is left as it is
            self._repo.heartbeat(*args, gone=params.gone)
            return
        progress = self._progress.snapshot()  # ages counted up to now, just before the write is sent
        self._repo.heartbeat(*args, progress=progress, gone=params.gone)

    def _after_failure(self, exc: Exception) -> float:
        """While our window is open, try again soon: a beat that lands in time keeps it open. Once it has
        closed we deliver nothing anyway, and a heartbeat that *lands* but whose answer never comes back (a
        network that loses responses) would still move our counter and keep the fleet from taking our
        leases, which then nobody processes; so from then on, after a beat that may have landed, we try once
        per ``lapsed_every`` (more than a lease duration), long enough for a taker to see the counter stand
        still. A beat that provably moved nothing (no connection was made, or DynamoDB answered with a
        throttle) is tried again soon all the same: otherwise a DynamoDB outage a little longer than the
        window kept every shard of the worker idle for up to ``lapsed_every`` after it ended."""
        if self._validity.valid():
            return self._retry
        pause = self._retry if _moved_nothing(exc) else self._lapsed_every
        if not self._lapsed:
            self._lapsed = True
            log_event(
                logger,
                "heartbeat_window_closed",
                logging.WARNING,
                worker=self._id,
                retry_s=pause,
                error=repr(exc),
            )
        return pause


def _moved_nothing(exc: Exception) -> bool:
    """The failed heartbeat cannot have reached the table: refused before it was sent, or throttled."""
    return isinstance(exc, ThrottledError) or (isinstance(exc, UnreachableError) and exc.unsent)


class BackgroundLane:
    """One slow call at a time on a daemon thread of its own; each call's event goes to ``report``."""

    def __init__(self, name: str, report: Callable[[Event], None]) -> None:
        self._report = report
        self._calls: queue.Queue[Callable[[], Event] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False
        self._lock = threading.Lock()

    def submit(self, call: Callable[[], Event]) -> None:
        """Run ``call`` after the ones before it; its event is reported when it ends."""
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()
        self._calls.put(call)

    def stop(self) -> None:
        """Run nothing more (a call under way is left to finish or hang on its daemon thread)."""
        self._calls.put(None)

    def _main(self) -> None:
        while (call := self._calls.get()) is not None:
            try:
                event = call()
            except Exception as exc:  # a bug in a call (each turns its provider's failures into events):
                # this thread must not die with it, or every later call would queue for ever unseen
                logger.error(
                    "background call failed", exc_info=exc, extra={"event": "background_call_failed"}
                )
                continue
            self._report(event)
