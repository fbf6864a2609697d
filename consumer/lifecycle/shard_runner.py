"""Every shard machine of a worker, driven on a small fixed set of threads instead of a thread per shard.

One scheduler (``run_once``, looped on one thread by ``start``) steps the machines, which is pure and cheap,
and keeps a heap of timers (a machine's ``WaitUntil``, a poll's pacing slot, a requested stop's final-fetch
grace, a processor's own ``call_later``). Whatever blocks goes to one of two bounded pools and comes back as
a message on the one inbox:

- the fetch pool runs GetRecords (or waits on a subscription). A shard's next fetch may run ahead while its
  batch is delivered (``retrieval.prefetch_batches`` results at most), without a thread of its own;
- the lane pool runs everything that calls the processor or writes a checkpoint: setup, delivery,
  checkpoints, shutdown_requested, shard_ended, lease_lost and the processor's timers. A shard has at most one
  lane job at a time and its jobs run in the order the machine asked for them, so a processor is never
  called twice at once. A blocked processor holds its lane's pool thread and nothing else: other shards'
  fetches, the coordinator and the heartbeats run on threads of their own (see docs/architecture.md for the
  pool bound's trade-off).

The scheduler reads the time only from the injected clock; tests call ``run_once`` on made-up time with pools
that run jobs when told (tests/unit/test_shard_runner.py).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, assert_never

from consumer.clock import Clock
from consumer.lifecycle.pools import Job, Pool
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.runner_fetch import Fetching
from consumer.lifecycle.runner_slot import (
    Crashed,
    Ended,
    FetchDone,
    Host,
    LaneFree,
    Later,
    Message,
    Poke,
    Slot,
    Stop,
    Timer,
    TimerKind,
)
from consumer.lifecycle.shard_messages import ShardEvent, Tick
from consumer.retrieval.reader import ShardReader

__all__ = ["Host", "LaneTimers", "ShardRunner"]

logger = logging.getLogger(__name__)

_STEPS_AT_ONCE = 16  # machine steps of one shard in a row at most
_LONGEST_WAIT = 0.5  # the scheduler looks at its clock at least this often (a fake clock moves by itself)


@dataclass(frozen=True)
class LaneTimers:
    """``processor.Timers`` on one shard's lane of a runner."""

    runner: ShardRunner
    key: str

    def call_later(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the shard's lane in ``delay`` seconds."""
        self.runner.call_later(self.key, delay, callback)


class ShardRunner(Fetching):
    """Runs shard machines; ``add`` one, ``stop`` or ``poke`` it by key, from any thread."""

    def __init__(
        self, clock: Clock, fetches: Pool, lanes: Pool, name: str = "shard-runner", *, threaded: bool = True
    ) -> None:
        """``threaded=False``: no scheduler thread; whoever made the runner calls ``run_once`` (tests)."""
        self._threaded = threaded
        self._clock = clock
        self._fetches = fetches
        self._lanes = lanes
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._inbox: list[tuple[str, Message]] = []
        self._closed = False
        self._thread: threading.Thread | None = None
        # The scheduler's own state (its thread only).
        self._slots: dict[str, Slot] = {}
        self._timers: list[Timer] = []
        self._seq = 0
        self._unqueued: list[tuple[str, Job]] = []  # shard ends the lane pool refused (``_submit_end``)

    # -- from any thread ------------------------------------------------------------------------------
    def add(self, host: Host) -> None:
        """Start driving ``host``'s machine (the scheduler's thread starts with the first shard)."""
        self._post(host.key, host)
        with self._cond:
            if self._thread is None and self._threaded and not self._closed:
                self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
                self._thread.start()

    def stop(self, key: str, reason: ShutdownReason, reader: ShardReader | None, finishing: bool) -> None:
        """The shard's stop (its reader already interrupted unless ``finishing``)."""
        self._post(key, Stop(reason, reader, finishing))

    def poke(self, key: str) -> None:
        """Step the shard's machine soon: something it reads has changed."""
        self._post(key, Poke())

    def call_later(self, key: str, delay: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the shard's lane after ``delay`` seconds (never beside a processor call)."""
        self._post(key, Later(delay, callback))

    def timers(self, key: str) -> LaneTimers:
        """The ``Timers`` a shard's processor is given (``InitializationInput.timers``)."""
        return LaneTimers(self, key)

    def close(self, timeout: float = 0.0) -> None:
        """Stop the scheduler and the pools (jobs under way are let go: their threads are daemons)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._fetches.close()
        self._lanes.close()

    @property
    def idle(self) -> bool:
        """No message waits for the scheduler."""
        with self._cond:
            return not self._inbox

    @property
    def shards(self) -> int:
        """Shards being driven now."""
        return len(self._slots)

    def _post(self, key: str, message: Message) -> None:
        with self._cond:
            self._inbox.append((key, message))
            self._cond.notify()

    # -- the scheduler ---------------------------------------------------------------------------------
    def _main(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                if not self._inbox:
                    due = self._timers[0].at - self._clock.monotonic() if self._timers else _LONGEST_WAIT
                    if due > 0:
                        self._cond.wait(min(due, _LONGEST_WAIT))
            try:
                self.run_once()
            except Exception:  # the thread every shard depends on must not die (each shard's bugs end it)
                logger.exception("shard runner failed", extra={"event": "shard_runner_failed"})

    def run_once(self) -> None:
        """Take every message, fire every timer that is due, then step each machine that has news."""
        with self._cond:
            inbox, self._inbox = self._inbox, []
        unqueued, self._unqueued = self._unqueued, []
        for key, end in unqueued:
            self._submit_end(key, end, first=False)
        dirty: dict[str, Slot] = {}
        for key, message in inbox:
            self._guarded(key, dirty, partial(self._receive, key, message))
        now = self._clock.monotonic()
        while self._timers and self._timers[0].at <= now:
            timer = heapq.heappop(self._timers)
            self._guarded(timer.key, dirty, partial(self._fire, timer))
        for key, slot in dirty.items():
            self._guarded(key, {}, partial(self._advance, slot))
        self._fetches.relieve()  # a job stuck behind blocked ones gets a thread (up to the bound)
        self._lanes.relieve()

    def _guarded(self, key: str, dirty: dict[str, Slot], work: Callable[[], Slot | None]) -> None:
        """Run one piece of the scheduler's work for ``key``; a bug of ours there ends that shard FAILED (its
        end logs the traceback) and the runner goes on with the others."""
        try:
            if (slot := work()) is not None:
                dirty[slot.key] = slot
        except Exception as exc:
            self._failed(key, exc)

    def _failed(self, key: str, exc: Exception) -> None:
        """``exc`` escaped the scheduler's work for ``key``. Never raises (the rest of the inbox, other shards'
        results among it, is still to be handled) and never swallows: a shard still running ends FAILED, and
        ``ShardConsumer.ended`` logs the traceback; one already ending or gone has nobody left to tell it, and
        an error raised while ending it is logged with the one it was ending on (its ``__context__``)."""
        slot = self._slots.get(key)
        if slot is not None and not slot.ending:
            try:
                self._end(slot, exc)
                return
            except Exception as during:  # the error path itself failed: both are shown (chained)
                exc = during
        logger.error(
            "shard runner failed",
            exc_info=exc,
            extra={"event": "shard_runner_failed", "shard": key, "ending": slot is not None},
        )

    def _receive(self, key: str, message: Message) -> Slot | None:  # noqa: PLR0911 - one case per message
        if not isinstance(message, ShardEvent | FetchDone | Stop | Later | Crashed | LaneFree):
            if isinstance(message, Ended):
                self._slots.pop(key, None)
                return None
            if isinstance(message, Poke):
                return self._slots.get(key)
            added = self._slots[key] = Slot(message)
            return added
        slot = self._slots.get(key)
        if slot is None or slot.ending:
            return None
        match message:
            case FetchDone():
                self._fetched(slot, message)
            case Stop():
                self._stopped(slot, message)
            case Later():
                self._timer(self._clock.monotonic() + message.delay, slot, "later", message.callback)
                return None
            case Crashed():
                self._end(slot, message.error)
                return None
            case LaneFree():
                slot.busy = False
            case _:  # an action's result
                slot.busy = False
                slot.events.append(message)
        return slot

    def _timer(self, at: float, slot: Slot, kind: TimerKind, payload: Any = None) -> int:
        self._seq += 1
        heapq.heappush(self._timers, Timer(at, self._seq, slot.key, kind, payload))
        return self._seq

    def _fire(self, timer: Timer) -> Slot | None:
        slot = self._slots.get(timer.key)
        if slot is None or slot.ending:
            return None
        match timer.kind:
            case "wait":
                if timer.seq != slot.wait:
                    return None  # a wait the machine has moved past
                slot.wait = None
                slot.events.append(Tick())
            case "pace":
                if timer.payload == slot.gen:
                    self._submit_fetch(slot)
                return None
            case "grace":
                if timer.payload != slot.gen or not slot.want or (reader := slot.work.reader) is None:
                    return None
                slot.work.interrupt_fetch(reader)
                self._cut(slot)  # the call may hang on: the machine goes on without it
            case "later":
                slot.callbacks.append(timer.payload)
            case _:
                assert_never(timer.kind)
        return slot

    def _advance(self, slot: Slot) -> None:
        """Step the machine while it has something to go on; hand out what it asks for (a few steps at a
        time: then the other shards and the inbox have their turn)."""
        for _ in range(_STEPS_AT_ONCE):
            if slot.ending or slot.busy:
                return
            if slot.callbacks:  # a processor's timer, between two of its calls
                self._on_lane(slot, slot.callbacks.pop(0), LaneFree)
                return
            if slot.want:  # the machine waits on a fetch
                return
            events, slot.events = [*slot.events, *slot.host.news()], []
            if not events and slot.wait is not None:
                return  # nothing new: the wait stands
            slot.wait = None
            for action in slot.host.machine.step(self._clock.monotonic(), events):
                slot.carry_out(action, self)
            if not slot.events:
                return
        self.poke(slot.key)  # more to do: after the others

    # -- what the slot asks of the runner ----------------------------------------------------------------
    def wait_until(self, slot: Slot, at: float) -> None:
        """A machine's ``WaitUntil``: a Tick at ``at`` (or sooner news)."""
        slot.wait = self._timer(at, slot, "wait")

    def on_lane(self, slot: Slot, job: Callable[[], ShardEvent]) -> None:
        """Run ``job`` (a processor call or a checkpoint write) on the lane pool; its event comes back."""
        self._on_lane(slot, job, None)

    def _on_lane(self, slot: Slot, job: Callable[[], Any], done: type[LaneFree] | None) -> None:
        slot.busy = True
        key = slot.key

        def run() -> None:
            message: Message
            try:
                result = job()
                message = done() if done is not None else result
            except BaseException as exc:  # the shard's boundary: it ends FAILED, reported once. Also a
                # SystemExit or CancelledError (a processor's timer calling sys.exit()): let through, it would
                # end the pool's thread or be logged there, and the shard would wait for this job for ever
                message = LaneFree() if done is not None else Crashed(_as_error(exc))
                if done is not None:
                    logger.error(
                        "processor timer failed",
                        exc_info=exc,
                        extra={"event": "processor_timer_failed", "shard": key},
                    )
            self._post(key, message)

        self._lanes.submit(run)

    def end(self, slot: Slot, finish: Any) -> None:
        """The machine finished: the rest (lease_lost, the report, the reader closed) on the lane."""
        self._end(slot, None, finish)

    def _end(self, slot: Slot, error: Exception | None, finish: Any = None) -> None:
        slot.ending, slot.busy = True, True
        slot.ahead.clear()
        slot.gen += 1
        key, once = slot.key, itertools.count()

        def run() -> None:
            if next(once):  # handed to the pool again after a submit that failed half-way: it ends once
                return
            try:
                slot.host.ended(finish, error)
            finally:
                self._post(key, Ended())

        self._submit_end(key, run, first=True)

    def _submit_end(self, key: str, run: Job, *, first: bool) -> None:
        """Hand a shard's end to the lane pool; a pool that refuses it (it could not start a thread) is asked
        again at every ``run_once`` until it takes it: the coordinator must hear of every shard once."""
        try:
            self._lanes.submit(run)
        except Exception:
            self._unqueued.append((key, run))
            if first:  # the traceback once; the shard does nothing more meanwhile (it is ending)
                logger.exception(
                    "shard end not handed to the lane pool: asked again",
                    extra={"event": "shard_end_deferred", "shard": key},
                )


def _as_error(exc: BaseException) -> Exception:
    """``exc`` as the ``Exception`` a ``Crashed`` carries (a ``BaseException`` that is not one, wrapped: it is
    the ``__cause__``)."""
    if isinstance(exc, Exception):
        return exc
    wrapped = RuntimeError(f"{type(exc).__name__} raised on the shard's lane: {exc!r}")
    wrapped.__cause__ = exc
    return wrapped
