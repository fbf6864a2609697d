"""One shard's consumption as a pure machine: ``ShardMachine.step(now, events) -> actions``.

No I/O, no clock reads, no threads: the shell (``ShardConsumer``) carries out each action and reports what
came of it as an event. ``transition`` is the one table: every (phase, event) pair has an answer written out
in a ``match`` (a transition, an explicit *ignored* or an explicit *invalid*; mypy fails on a missing event).
``decide`` then says what to do from the state alone, so that several events in one step (a fetch's result
and a stop that came during it) give one answer.

The rules it keeps (see docs/architecture.md): a stop and our validity are looked at between rounds only,
so a requested stop lets the round under way (a fetch and the delivery of what it brings) finish, then
drains: shutdown_requested, done records waited for, the final checkpoint on its own deadline. A lost lease
ends at once. Failures are decided by ``retry.verdict``: a refusal or a bug ends the shard FAILED at once;
others are retried with capped exponential backoff, and past ``give_up_after`` of failures (throttles never
count) the shard is given up.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import assert_never

from consumer.lifecycle import retry
from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_decide import ahead, decide, finish, good_round, note
from consumer.lifecycle.shard_messages import (
    CheckpointFailed,
    CheckpointWritten,
    Delivered,
    DeliveryHalted,
    DeliveryInterrupted,
    Fetched,
    FetchFailed,
    Finish,
    NotStarted,
    SetupFailed,
    ShardAction,
    ShardEndCalled,
    ShardEvent,
    ShutdownNotified,
    Started,
    StopRequested,
    Tick,
    ValidityChanged,
    WatermarkAdvanced,
    WindowClosed,
    WriterChanged,
)
from consumer.lifecycle.shard_model import (
    AT_ONCE,
    Mode,
    Phase,
    Rules,
    ShardState,
    Stage,
    Step,
    Verdict,
    Work,
)

__all__ = ["RECENT_BATCHES", "ShardMachine", "decide", "transition"]

logger = logging.getLogger(__name__)

RECENT_BATCHES = 5  # a batch is started only with the longest of the last few processor calls' time left


class ShardMachine:
    """One shard consumer's decisions, stepped on events; ``state`` is the whole of what it knows."""

    def __init__(self, rules: Rules, now: float) -> None:
        self.rules = rules
        self.state = ShardState(saved_at=now)

    def step(self, now: float, events: list[ShardEvent]) -> list[ShardAction]:
        """Apply ``events`` in order, then say what to do next (``Finish`` once, when it ends)."""
        before = self.state
        s = before
        for ev in events:
            answer = transition(s, ev, now, self.rules)
            if answer.verdict is Verdict.INVALID:  # the shell never sends it: a bug worth seeing
                note(self.rules, "shard_event_invalid", logging.WARNING, phase=s.phase.value, got=repr(ev))
            s = answer.state
        s, actions = decide(s, now, self.rules)
        self.state = s
        if s.phase is Phase.FINISHED and before.phase is not Phase.FINISHED:
            assert s.outcome is not None
            self.rules.retries.ended(self.rules.stream, self.rules.shard)
            actions.append(Finish(s.outcome, s.halted_at, s.detail))
        return actions

    @property
    def finished(self) -> bool:
        """The machine reached FINISHED."""
        return self.state.phase is Phase.FINISHED


def _ignored(s: ShardState, why: str) -> Step:
    return Step(s, Verdict.IGNORED, why)


def _invalid(s: ShardState, why: str) -> Step:
    return Step(s, Verdict.INVALID, why)


# -- the table ------------------------------------------------------------------------------------------
def transition(s: ShardState, ev: ShardEvent, now: float, r: Rules) -> Step:  # noqa: C901, PLR0911, PLR0912 - the table
    """What ``ev`` does to ``s``; one case per event type, each naming the phases it applies to."""
    if s.phase is Phase.FINISHED:
        return _ignored(s, "finished: nothing more happens")
    match ev:
        case Started() | NotStarted() | SetupFailed():
            if s.awaiting is not Work.SETUP:
                return _invalid(s, "no setup in flight")
            return _setup_result(replace(s, awaiting=None), ev, now, r)
        case Fetched() | FetchFailed():
            if s.awaiting is not Work.FETCH:
                return _invalid(s, "no fetch in flight")
            return _fetch_result(replace(s, awaiting=None), ev, now, r)
        case Delivered() | DeliveryHalted() | DeliveryInterrupted():
            if s.awaiting is not Work.DELIVER:
                return _invalid(s, "no delivery in flight")
            return Step(_delivery_result(replace(s, awaiting=None), ev))
        case CheckpointWritten() | CheckpointFailed():
            if s.awaiting is not Work.CHECKPOINT:
                return _invalid(s, "no checkpoint write in flight")
            return Step(_checkpoint_result(replace(s, awaiting=None), ev, now, r))
        case ShutdownNotified():
            if s.awaiting is not Work.NOTIFY:
                return _invalid(s, "shutdown_requested was not called")
            return Step(replace(s, awaiting=None, stage=Stage.WAIT_DONE, deadline=now + r.final_timeout))
        case ShardEndCalled():
            if s.awaiting is not Work.END:
                return _invalid(s, "shard_ended was not called")
            return Step(replace(s, awaiting=None, stage=Stage.CHECK))
        case WindowClosed():
            if s.awaiting is None:
                return _invalid(s, "no action in flight to find our window closed")
            if ev.lost or s.phase is Phase.DRAINING:
                return Step(
                    finish(s, Outcome.LOST), why="the lease is gone (a drain cannot write without it)"
                )
            # Not known lost: back to the top of the round, which suspends while the window is shut; what
            # was not done is done again (a batch interrupted is delivered again).
            return Step(replace(s, awaiting=None, stage=Stage.TOP), why="redone once the window opens")
        case WatermarkAdvanced():
            return Step(replace(s, watermark=ev.watermark, pending=ev.pending))
        case WriterChanged():
            return Step(replace(s, written=ev.written, deferred=ev.deferred))
        case StopRequested():
            match ev.reason:
                case ShutdownReason.LEASE_LOST:  # overrides a requested stop under way
                    pass
                case ShutdownReason.REQUESTED:
                    if s.stop is not None:
                        return _ignored(s, "a stop is already under way (only a lost lease overrides it)")
                case _:
                    assert_never(ev.reason)
            return Step(replace(s, stop=ev.reason), why="looked at between rounds; a lost lease at once")
        case ValidityChanged():
            return Step(replace(s, valid=ev.valid, window_ends=ev.window_ends))
        case Tick():
            if s.wake_at == AT_ONCE:
                return _ignored(s, "no wait under way: the step reads the time from its `now`")
            if s.wake_at > now:
                return _ignored(s, "not yet: the wait goes on")
            return Step(replace(s, wake_at=AT_ONCE))
        case _:
            assert_never(ev)


def _setup_result(s: ShardState, ev: Started | NotStarted | SetupFailed, now: float, r: Rules) -> Step:
    match ev:
        case Started():
            start = ev.start
            began = replace(
                s, phase=Phase.READING, mode=ev.mode, written=start, processed=start, saved_at=now
            )
            return Step(good_round(began, r, now))
        case NotStarted():
            return Step(finish(s, ev.outcome), why="nothing to consume: the lease moved, or the shard ended")
        case SetupFailed():
            return Step(_failed(s, ev.verdict, ev.error, now, r, "setup"))
        case _:
            assert_never(ev)


def _fetch_result(s: ShardState, ev: Fetched | FetchFailed, now: float, r: Rules) -> Step:
    match ev:
        case Fetched() if ev.nothing:
            return Step(good_round(s, r, now), why="nothing came back (interrupted, or an iterator renewed)")
        case Fetched():
            return Step(
                replace(s, held=ev.count, held_last=ev.last, shard_end=ev.shard_end, stage=Stage.DELIVER)
            )
        case FetchFailed():
            return Step(_failed(s, ev.verdict, ev.error, now, r, "fetch"))
        case _:
            assert_never(ev)


def _delivery_result(s: ShardState, ev: Delivered | DeliveryHalted | DeliveryInterrupted) -> ShardState:
    s = replace(s, took=(s.took + ev.took)[-RECENT_BATCHES:], stage=Stage.SAVE)
    match ev:
        case Delivered():
            processed = s.held_last if s.mode is Mode.AUTO else s.processed
            return replace(s, held=0, held_last=None, processed=processed)
        case DeliveryHalted():  # the batch is dropped: saved up to the record before, then HALTED
            before = ev.before if s.mode is Mode.AUTO and ev.before is not None else s.processed
            return replace(s, halting=True, halted_at=ev.at, processed=before, held=0, held_last=None)
        case DeliveryInterrupted():
            return s  # kept in hand: the next owner gets it again
        case _:
            assert_never(ev)


def _checkpoint_result(
    s: ShardState, ev: CheckpointWritten | CheckpointFailed, now: float, r: Rules
) -> ShardState:
    match ev:
        case CheckpointWritten():
            covered = s.deferred is not None and not ev.position < s.deferred
            # one behind what is written was skipped as saved already (the processor's own checkpoint went
            # further since the write was asked for): what is written never moves back
            written = ev.position if ahead(ev.position, s.written) else s.written
            return replace(s, written=written, deferred=None if covered else s.deferred)
        case CheckpointFailed():
            deferred = ev.position if s.deferred is None or s.deferred < ev.position else s.deferred
            s = replace(s, deferred=deferred)
            if ev.verdict is not retry.Verdict.SURFACE and s.halting:
                note(r, "halt_checkpoint_deferred", logging.WARNING, error=ev.error)
                return finish(s, Outcome.HALTED, s.halted_at)
            if ev.verdict is not retry.Verdict.SURFACE and s.phase is Phase.DRAINING:
                if now >= s.deadline:
                    note(r, "final_checkpoint_failed", logging.WARNING, error=ev.error)
                    return finish(s, Outcome.STOPPED)
                return replace(s, wake_at=now + r.final_retry)
            return _failed(s, ev.verdict, ev.error, now, r, "checkpoint")
        case _:
            assert_never(ev)


def _failed(
    s: ShardState, decided: retry.Verdict, error: str, now: float, r: Rules, operation: str
) -> ShardState:
    """``retry.next_try``'s answer, on made-up time: a bug or a refusal ends the shard FAILED; past the bound
    (which throttles never reach) GAVE_UP; else wait a capped, jittered exponential backoff. A failure that
    may pass, or a throttle, is told through ``r.retries`` (the first at once, the rest in a worker's summary);
    ``operation`` is what failed (setup, fetch, checkpoint)."""
    match decided:
        case retry.Verdict.SURFACE:
            return finish(s, Outcome.FAILED, detail=error)
        case retry.Verdict.BACK_OFF | retry.Verdict.RETRY:
            throttled = decided is retry.Verdict.BACK_OFF
        case _:
            assert_never(decided)
    bounds = retry.Backoff(r.backoff_base, r.backoff_max, r.give_up_after)
    failures, since, delay = retry.next_try(
        bounds, s.failures, s.failing_since, now, throttled=throttled, jitter=r.jitter()
    )
    if delay is None:
        assert since is not None
        failing = round(now - since, 3)
        note(r, "shard_giving_up", logging.ERROR, failures=failures, failing_s=failing, error=error)
        return finish(s, Outcome.GAVE_UP)
    if throttled:
        r.retries.throttled(now, r.stream, r.shard, r.epoch, operation=operation, delay=delay, error=error)
    else:
        r.retries.failed(now, r.stream, r.shard, r.epoch, operation=operation, delay=delay, error=error)
    return replace(s, stage=Stage.TOP, failures=failures, failing_since=since, wake_at=now + delay)
