"""The shard machine's second half: ``decide(state, now, rules) -> (state, actions)``, what to do next from
the state alone (the transitions are in ``shard_machine.py``).

A round of READING goes FLUSH (resend a deferred checkpoint), FETCH, DELIVER, SAVE (the checkpoint if due),
CLOSE; a stop and our validity are looked at at TOP, between rounds, and a lost lease at once. Each call
settles on one action to wait for (``awaiting``), a ``WaitUntil``, or FINISHED.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import assert_never

from consumer.lifecycle.messages import Metric, Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_messages import (
    Checkpoint,
    CloseReader,
    Deliver,
    EndShard,
    Fetch,
    NotifyShutdown,
    Setup,
    ShardAction,
    WaitUntil,
)
from consumer.lifecycle.shard_model import (
    AT_ONCE,
    Mode,
    Phase,
    Rules,
    ShardState,
    Stage,
    Work,
)
from consumer.logs import log_event
from consumer.records import SHARD_END, Position

__all__ = ["ahead", "decide", "final_position", "finish", "good_round", "note"]

logger = logging.getLogger(__name__)

_Next = tuple[ShardState, list[ShardAction]]
_SETTLE = 32  # far more passes than any path takes (TOP..CLOSE and back is seven)


def note(r: Rules, event: str, level: int = logging.INFO, **fields: object) -> None:
    """Log ``event`` with the shard's identity."""
    log_event(logger, event, level, stream=r.stream, shard=r.shard, epoch=r.epoch, **fields)


def finish(s: ShardState, outcome: Outcome, at: Position | None = None, detail: str = "") -> ShardState:
    """``s`` ended with ``outcome``."""
    return replace(
        s, phase=Phase.FINISHED, outcome=outcome, halted_at=at, detail=detail, awaiting=None, wake_at=AT_ONCE
    )


def good_round(s: ShardState, r: Rules, now: float) -> ShardState:
    """A round (or the setup) went through: back to TOP, and the failures before it no longer count."""
    if s.failing_since is not None:
        r.retries.recovered(now, r.stream, r.shard, r.epoch)
    return replace(s, stage=Stage.TOP, failures=0, failing_since=None)


def final_position(s: ShardState) -> Position | None:
    """What a drain's final checkpoint saves: everything delivered (auto), done (manual), nothing (explicit)."""
    match s.mode:
        case Mode.AUTO:
            return s.processed
        case Mode.MANUAL:
            return s.watermark
        case Mode.EXPLICIT:
            return None
        case _:
            assert_never(s.mode)


def decide(s: ShardState, now: float, r: Rules) -> _Next:
    """What to do next: settle on an action to await, a wait, or the end."""
    actions: list[ShardAction] = []
    for _ in range(_SETTLE):
        if s.phase is Phase.FINISHED or s.awaiting is not None:
            return s, actions
        match s.stop:
            case ShutdownReason.LEASE_LOST:  # at once, whatever the phase
                return finish(s, Outcome.LOST), actions
            case ShutdownReason.REQUESTED | None:  # a requested stop is looked at between rounds
                pass
            case _:
                assert_never(s.stop)
        s, more = _phase(s, now, r)
        actions += more
        if any(isinstance(a, WaitUntil) for a in more):
            return s, actions
    raise AssertionError(f"the shard machine did not settle: {s}")


def _phase(s: ShardState, now: float, r: Rules) -> _Next:  # noqa: PLR0911 - one case per phase
    match s.phase:
        case Phase.STARTING:
            if (between := _between_rounds(s, now, r)) is not None:
                return between
            return replace(s, awaiting=Work.SETUP), [Setup()]
        case Phase.READING:
            return _reading(s, now, r)
        case Phase.SUSPENDED:
            if _requested(s):
                return _stopping(s), []
            if s.valid:  # failures before the suspension do not count against the bound
                since = None if s.failing_since is None else now
                return replace(s, phase=s.resume, stage=Stage.TOP, wake_at=AT_ONCE, failing_since=since), []
            return _wait(s, now, now + r.recheck)
        case Phase.DRAINING:
            return _draining(s, now, r)
        case Phase.ENDING:
            return _ending(s, now, r)
        case Phase.FINISHED:
            return s, []
        case _:
            assert_never(s.phase)


def _requested(s: ShardState) -> bool:
    """A requested stop is under way (a lost lease never gets here: ``decide`` finishes it first)."""
    match s.stop:
        case ShutdownReason.REQUESTED:
            return True
        case ShutdownReason.LEASE_LOST | None:
            return False
        case _:
            assert_never(s.stop)


def _stopping(s: ShardState) -> ShardState:
    """A requested stop, seen between rounds: before the setup nothing to drain; after it, drain."""
    origin = s.resume if s.phase is Phase.SUSPENDED else s.phase
    if origin is Phase.STARTING:
        return finish(s, Outcome.STOPPED)
    return replace(s, phase=Phase.DRAINING, stage=Stage.NOTIFY, wake_at=AT_ONCE)


def _between_rounds(s: ShardState, now: float, r: Rules) -> _Next | None:
    """The stop, the wait under way and our window, looked at in that order; None: go on."""
    if _requested(s):
        return _stopping(s), []
    if s.wake_at > now:
        return s, [WaitUntil(s.wake_at)]
    if not s.valid:  # hold nothing while the window is shut; failures meanwhile do not count
        wake = now + r.recheck
        since = None if s.failing_since is None else now
        held = replace(s, phase=Phase.SUSPENDED, resume=s.phase, wake_at=wake, failing_since=since)
        return held, [CloseReader(), WaitUntil(wake)]
    return None


def _wait(s: ShardState, now: float, at: float) -> _Next:
    if s.wake_at > now:
        return s, [WaitUntil(s.wake_at)]
    return replace(s, wake_at=at), [WaitUntil(at)]


def _write(s: ShardState, position: Position) -> _Next:
    return replace(s, awaiting=Work.CHECKPOINT), [Checkpoint(position)]


def ahead(position: Position | None, written: Position | None) -> bool:
    """Whether a checkpoint at ``position`` would save anything: one at or behind what this ownership has
    written (the processor may have checkpointed further than what was delivered or done) is saved already."""
    return position is not None and (written is None or written < position)


def _not_here(s: ShardState) -> AssertionError:
    return AssertionError(f"{s.stage} is not a stage of {s.phase}")


def _reading(s: ShardState, now: float, r: Rules) -> _Next:  # noqa: C901, PLR0911, PLR0912 - one case per stage
    match s.stage:
        case Stage.TOP:
            if (between := _between_rounds(s, now, r)) is not None:
                return between
            return replace(s, stage=Stage.FLUSH), []
        case Stage.FLUSH:
            if s.deferred is not None:
                return _write(s, s.deferred)
            if s.failing_since is not None and ahead(position := final_position(s), s.written):
                # failing rounds never reach SAVE: what was delivered (auto) or done (manual) is saved before
                # the next try, not after the interval, as the shard may be given up (a throttle never is)
                assert position is not None
                return _write(replace(s, saved_at=now), position)
            return replace(s, stage=Stage.FETCH), []
        case Stage.FETCH:
            if s.held or s.shard_end:
                return replace(s, stage=Stage.DELIVER), []
            return _fetch(s, now, r)
        case Stage.DELIVER:
            if not s.held:
                return replace(s, stage=Stage.SAVE), []
            return _deliver(s, now, r)
        case Stage.SAVE:
            return _save(replace(s, stage=Stage.CLOSE), now, r, idle=not s.held)
        case Stage.CLOSE:
            if s.halting:
                return finish(s, Outcome.HALTED, s.halted_at), []
            if s.shard_end and not s.held:
                return replace(good_round(s, r, now), phase=Phase.ENDING, stage=Stage.WAIT_DONE), []
            return good_round(s, r, now), []
        case Stage.NOTIFY | Stage.WAIT_DONE | Stage.FINAL | Stage.CALL | Stage.CHECK:
            raise _not_here(s)
        case _:
            assert_never(s.stage)


def _fetch(s: ShardState, now: float, r: Rules) -> _Next:
    """Fetch, unless manual mode's delivered and not done records reached ``max_pending`` (then save what is
    done and look again a little later: what is held stays bounded)."""
    actions: list[ShardAction] = [Metric("PendingRecords", s.pending, r.stream, r.shard)]
    if s.pending >= r.max_pending:
        if s.paused_at is None:
            note(r, "fetching_paused", logging.WARNING, pending=s.pending, max_pending_records=r.max_pending)
            actions.append(Metric("FetchingPaused", 1, r.stream, r.shard))
            s = replace(s, paused_at=now)
        return replace(s, stage=Stage.SAVE, wake_at=now + r.done_wait), actions
    if s.paused_at is not None:
        note(r, "fetching_resumed", pending=s.pending, paused_s=round(now - s.paused_at, 3))
        s = replace(s, paused_at=None)
    return replace(s, awaiting=Work.FETCH), [*actions, Fetch()]


def _deliver(s: ShardState, now: float, r: Rules) -> _Next:
    """Deliver if our window leaves the time the recent calls took (at most half the window, so a slow
    processor still starts right after a renewal); if not, look again a little later."""
    needed = min(max(s.took, default=0.0), r.window / 2)
    remaining = max(0.0, s.window_ends - now)
    if remaining >= needed:
        if s.room_wait:
            note(r, "batch_window_open", needed_s=round(needed, 3))
        return replace(s, room_wait=False, awaiting=Work.DELIVER), [Deliver()]
    if not s.room_wait:
        note(r, "batch_waits_for_window", needed_s=round(needed, 3), remaining_s=round(remaining, 3))
    return replace(s, room_wait=True, stage=Stage.SAVE, wake_at=now + r.room_recheck), []


def _save(s: ShardState, now: float, r: Rules, *, idle: bool) -> _Next:
    """The checkpoint, if due: auto after ``auto_interval`` (or before a halt) over what was delivered; manual
    over what is done, when idle or after ``flush_interval``; explicit never (the processor writes its own)."""
    position: Position | None
    match s.mode:
        case Mode.AUTO:
            # a halt ends the shard after this round: its checkpoint is written whatever the interval
            due = (s.halting or now - s.saved_at >= r.auto_interval) and ahead(s.processed, s.written)
            position = s.processed
        case Mode.MANUAL:
            due = (idle or now - s.saved_at >= r.flush_interval) and s.watermark is not None
            position = s.watermark
        case Mode.EXPLICIT:
            due, position = False, None
        case _:
            assert_never(s.mode)
    if not due or position is None:
        return s, []
    s = replace(s, saved_at=now)
    if not ahead(position, s.written):  # saved already (the writer would skip it too)
        return s, []
    return _write(s, position)


def _draining(s: ShardState, now: float, r: Rules) -> _Next:
    match s.stage:
        case Stage.NOTIFY:  # first, so that a buffering processor can flush and mark its records done
            return replace(s, awaiting=Work.NOTIFY), [NotifyShutdown()]
        case Stage.WAIT_DONE:
            if s.mode is Mode.MANUAL and s.pending > 0 and s.valid and now < s.deadline:
                return _wait(s, now, min(s.deadline, now + r.done_wait))
            return replace(s, stage=Stage.FINAL, deadline=now + r.final_timeout, wake_at=AT_ONCE), []
        case Stage.FINAL:
            position = final_position(s)
            if position is None or not ahead(position, s.written):
                note(r, "shard_drained", checkpoint=str(s.written))
                return finish(s, Outcome.STOPPED), []
            if s.wake_at > now:
                return s, [WaitUntil(s.wake_at)]
            return _write(s, position)
        case Stage.TOP | Stage.FLUSH | Stage.FETCH | Stage.DELIVER | Stage.SAVE | Stage.CLOSE:
            raise _not_here(s)
        case Stage.CALL | Stage.CHECK:
            raise _not_here(s)
        case _:
            assert_never(s.stage)


def _ending(s: ShardState, now: float, r: Rules) -> _Next:  # noqa: C901, PLR0911 - one case per stage
    match s.stage:
        case Stage.TOP:  # only after a failure's backoff: the end is part of the round that reached it
            if (between := _between_rounds(s, now, r)) is not None:
                return between
            return replace(s, stage=Stage.CHECK if s.ended else Stage.WAIT_DONE), []
        case Stage.WAIT_DONE:  # every delivered record done first (manual), however long it takes
            if s.mode is Mode.MANUAL and s.pending > 0 and s.valid:
                return _wait(s, now, now + r.done_wait)
            return replace(s, stage=Stage.CALL, wake_at=AT_ONCE), []
        case Stage.CALL:
            return replace(s, ended=True, awaiting=Work.END), [EndShard()]
        case Stage.CHECK:
            if s.deferred is not None:  # a SHARD_END write that failed transiently is sent again
                return _write(s, s.deferred)
            if s.written == SHARD_END:
                return finish(s, Outcome.SHARD_END), []
            note(
                r,
                "shard_end_not_checkpointed",
                logging.ERROR,
                hint="shard_ended must call data.checkpointer.checkpoint(); children wait until it does",
            )
            return finish(s, Outcome.HALTED, SHARD_END), []
        case Stage.FLUSH | Stage.FETCH | Stage.DELIVER | Stage.SAVE | Stage.CLOSE:
            raise _not_here(s)
        case Stage.NOTIFY | Stage.FINAL:
            raise _not_here(s)
        case _:
            assert_never(s.stage)
