"""One lease this worker holds, as a total state machine: ``step(ownership, event, context) -> Step``.

Every (phase, event) pair has one answer here, written out in a ``match`` that names every phase (``mypy``
fails on a phase or an event without one): a transition, an explicit *ignored* (the event says nothing new
to this phase) or an explicit *invalid* (the coordinator never sends it there). The coordinator only sends
events and applies the step; it never edits an ownership. The tables in docs/protocol.md are generated from
this code by walking every pair (``python -m consumer.lifecycle.tables``).

A write that fails for a transient reason goes back to its phase and is sent again at ``due_at``; one that
loses its condition means the lease moved on, so the ownership ends.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import assert_never

from consumer.leases.model import Lease
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    LeaseWrite,
    Metric,
    Outcome,
    Result,
    ShardFinished,
    Start,
    Stop,
    WriteKind,
)
from consumer.lifecycle.ownership_model import (
    AT_ONCE,
    NEVER,
    Context,
    Deadline,
    Due,
    Finished,
    Ownership,
    OwnEvent,
    Phase,
    Seen,
    Step,
    Strand,
    Unasked,
    Verdict,
)
from consumer.lifecycle.processor import ShutdownReason
from consumer.logs import log_event

__all__ = [
    "HANDED_ON",
    "Context",
    "Deadline",
    "Due",
    "Finished",
    "OwnEvent",
    "Ownership",
    "Phase",
    "Seen",
    "Step",
    "Strand",
    "Unasked",
    "Verdict",
    "begin",
    "passing_on",
    "step",
]

logger = logging.getLogger(__name__)


def _ignored(o: Ownership, why: str) -> Step:
    return Step(o, [], Verdict.IGNORED, why)


def _invalid(o: Ownership, ev: OwnEvent, why: str) -> Step:
    log_event(
        logger, "ownership_event_invalid", logging.WARNING, lease=o.key, phase=o.phase.value, got=repr(ev)
    )
    return Step(o, [], Verdict.INVALID, why)


# -- beginnings ---------------------------------------------------------------------------------------
def begin(lease: Lease) -> Step:
    """A lease given to us (or assigned to ourselves as the leader): start consuming it."""
    return Step(Ownership(lease), [Start(lease), Metric("LeasesTaken", 1, lease.stream, lease.shard_id)])


def passing_on(lease: Lease, to: str | None) -> Step:
    """A lease received while shutting down: never started, handed straight on (or released)."""
    return Step(_moving(Ownership(lease), to), [], why="received while shutting down: never started")


def not_ours_to_read(lease: Lease, to: str | None) -> Step:
    """A lease of a stream we do not consume (workers list different streams, as during a rolling deploy
    that adds or removes one): never started, handed straight on to a worker that consumes it (or
    released, for the leader to assign)."""
    return Step(_moving(Ownership(lease), to), [], why="a stream this worker does not consume: never started")


# -- the step -----------------------------------------------------------------------------------------
def step(o: Ownership, ev: OwnEvent, ctx: Context) -> Step:  # noqa: PLR0911 - one case per event type
    """The one transition function: what ``ev`` does to ``o``."""
    match ev:
        case Seen():
            return _seen(o, ev.lease, ctx)
        case Due():
            return _due(o, ev, ctx)
        case Strand():
            return _give_up(o, ctx.now, asked_too=True)
        case Unasked():
            return _give_up(o, ctx.now, asked_too=False)
        case Finished():
            return _finished(o, ev)
        case ActionResult():
            return _written(o, ev, ctx)
        case Deadline():
            stop: list[Action] = [Stop(o.key, ShutdownReason.LEASE_LOST)] if o.consuming else []
            return Step(None, stop, why="left to expire, never to two owners")
        case _:
            assert_never(ev)


def _lose(o: Ownership, why: str) -> Step:
    """The lease moved on without us (another owner or epoch in the table, or our write was fenced)."""
    actions: list[Action] = [Metric("LeasesLost", 1, o.lease.stream, o.lease.shard_id)]
    if o.consuming:
        actions.insert(0, Stop(o.key, ShutdownReason.LEASE_LOST))
    return Step(None, actions, why=why)


def _moving(o: Ownership, to: str | None) -> Ownership:
    phase = Phase.TRANSFERRING if to is not None else Phase.RELEASING
    return replace(o, phase=phase, give_to=to, due_at=AT_ONCE, failures=0, writing=None)


def _seen(o: Ownership, lease: Lease | None, ctx: Context) -> Step:
    if lease is None or lease.owner != ctx.me or lease.epoch != o.lease.epoch:
        log_event(logger, "lease_lost", logging.WARNING, worker=ctx.me, lease=o.key)
        return _lose(o, "the lease moved on without us")
    match o.phase:
        case Phase.RUNNING | Phase.HALTED:
            to = lease.handoff_to
            if to is None or to == ctx.me:
                return Step(replace(o, lease=lease), [], why="our copy follows the table")
            asked = Phase.ASKED if o.phase is Phase.RUNNING else Phase.HALTED_ASKED
            new = replace(o, lease=lease, phase=asked, give_to=to, due_at=ctx.now + ctx.ask_delay)
            return Step(
                new, [], why="the requester, woken by the request, is polling fast one idle poll later"
            )
        case Phase.ASKED | Phase.HALTED_ASKED:
            return Step(replace(o, lease=lease), [], why="the request in hand stands")
        case Phase.STOPPING | Phase.TRANSFERRING | Phase.RELEASING | Phase.ENDING | Phase.WRITING:
            return _ignored(o, "on its way out: its write is conditional on the lease as it holds it")
        case _:
            assert_never(o.phase)


def _due(o: Ownership, ev: Due, ctx: Context) -> Step:
    match o.phase:
        case Phase.ASKED:
            log_event(logger, "handoff_started", worker=ctx.me, lease=o.key, to=o.give_to)
            new = replace(o, phase=Phase.STOPPING, stop_asked_at=ctx.now, due_at=NEVER)
            return Step(new, [Stop(o.key, ShutdownReason.REQUESTED)], why="drain, then final checkpoint")
        case Phase.HALTED_ASKED:
            log_event(logger, "handoff_started", worker=ctx.me, lease=o.key, to=o.give_to)
            new = _moving(replace(o, stop_asked_at=ctx.now), o.give_to)
            return Step(new, [], why="nothing to drain: the successor halts at the same record")
        case Phase.TRANSFERRING | Phase.RELEASING | Phase.ENDING:
            kind = _WRITES[o.phase]
            write = LeaseWrite(kind, o.lease, to=o.give_to, halted_at=o.halted_at, given_up=o.gave_up)
            return Step(replace(o, phase=Phase.WRITING, writing=kind, due_at=NEVER), [write])
        case Phase.RUNNING | Phase.STOPPING | Phase.HALTED | Phase.WRITING:
            return _invalid(o, ev, "nothing is timed in this phase")
        case _:
            assert_never(o.phase)


_WRITES = {
    Phase.TRANSFERRING: WriteKind.TRANSFER,
    Phase.RELEASING: WriteKind.RELEASE,
    Phase.ENDING: WriteKind.END,
}
_PHASES = {kind: phase for phase, kind in _WRITES.items()}


def _give_up(o: Ownership, now: float, *, asked_too: bool) -> Step:
    """Release the lease (the leader reassigns it); ``asked_too``: even one the leader asked for."""
    match o.phase:
        case Phase.RUNNING:
            new = replace(o, phase=Phase.STOPPING, give_to=None, stop_asked_at=now)
            return Step(
                new, [Stop(o.key, ShutdownReason.REQUESTED, last_poll=False)], why="drain, then release"
            )
        case Phase.HALTED:
            return Step(_moving(replace(o, stop_asked_at=now), None), [], why="nothing to drain")
        case Phase.ASKED if asked_too:
            new = replace(o, phase=Phase.STOPPING, give_to=None, stop_asked_at=now, due_at=NEVER)
            stop = Stop(o.key, ShutdownReason.REQUESTED, last_poll=False)
            return Step(new, [stop], why="the plan overrides the request")
        case Phase.HALTED_ASKED if asked_too:
            return Step(
                _moving(replace(o, stop_asked_at=now), None), [], why="the plan overrides the request"
            )
        case Phase.ASKED | Phase.HALTED_ASKED:
            return _ignored(o, "its hand-off is due within an idle poll")
        case Phase.STOPPING | Phase.TRANSFERRING | Phase.RELEASING | Phase.ENDING | Phase.WRITING:
            return _ignored(o, "already on its way out")
        case _:
            assert_never(o.phase)


# Outcomes after which the lease goes to a successor the coordinator picks (unless a hand-off named one).
HANDED_ON = frozenset({Outcome.STOPPED, Outcome.GAVE_UP, Outcome.FAILED})


def _finished(o: Ownership, ev: Finished) -> Step:
    if ev.report.epoch != o.lease.epoch:
        return _ignored(o, "a consumer of an earlier ownership of ours")
    match o.phase:
        case Phase.RUNNING | Phase.ASKED | Phase.STOPPING:
            return _outcome(o, ev.report, ev.successor)
        case (
            Phase.HALTED
            | Phase.HALTED_ASKED
            | Phase.TRANSFERRING
            | Phase.RELEASING
            | Phase.ENDING
            | Phase.WRITING
        ):
            return _ignored(o, "its consumer has already finished")
        case _:
            assert_never(o.phase)


def _outcome(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:  # noqa: PLR0911 - per outcome
    """A running consumer (RUNNING, ASKED or STOPPING) ended with ``ev.outcome``."""
    stopping = o.phase is Phase.STOPPING
    match ev.outcome:
        case Outcome.STOPPED if stopping:
            return Step(_moving(o, o.give_to), [], why="drained and checkpointed")
        case Outcome.STOPPED:
            return Step(_moving(o, successor), [], why="stopped unasked: keep nothing we cannot account for")
        case Outcome.SHARD_END:
            return Step(
                replace(o, phase=Phase.ENDING, give_to=None, due_at=AT_ONCE, failures=0),
                [],
                why="SHARD_END checkpointed: mark the lease ENDED",
            )
        case Outcome.HALTED if stopping:
            halted = replace(o, halted_at=ev.halted_at)
            return Step(_moving(halted, o.give_to), [], why="halted while draining: handed on as asked")
        case Outcome.HALTED:
            phase = Phase.HALTED_ASKED if o.phase is Phase.ASKED else Phase.HALTED
            mark = LeaseWrite(WriteKind.HALT, o.lease, halted_at=ev.halted_at)
            new = replace(o, phase=phase, halted_at=ev.halted_at)
            why = "kept, marked for operators (the worker's `HaltedShards` gauge counts it)"
            return Step(new, [mark], why=why)
        case Outcome.GAVE_UP | Outcome.FAILED:
            name = "ShardsGivenUp" if ev.outcome is Outcome.GAVE_UP else "ShardsFailed"
            # A hand-off or shutdown under way keeps its destination.
            to = o.give_to if stopping else successor
            metric = Metric(name, 1, o.lease.stream, o.lease.shard_id)
            return Step(
                _moving(replace(o, gave_up=True), to),
                [metric],
                why="let another worker try (a member has no successor: RELEASING)",
            )
        case Outcome.LOST:
            return _lose(replace(o, phase=Phase.RELEASING), "its consumer already stopped")
        case _:
            assert_never(ev.outcome)


def _written(o: Ownership, ev: ActionResult, ctx: Context) -> Step:
    if ev.lease.epoch != o.lease.epoch:
        return _ignored(o, "a write of an earlier ownership of ours")
    match ev.kind:
        case WriteKind.HALT:  # informational: a failure is only retried when the lease moves again
            return Step(replace(o, lease=ev.new) if ev.new is not None else o, [], why="informational")
        case WriteKind.TRANSFER | WriteKind.RELEASE | WriteKind.END:
            return _result(o, ev, ctx)
        case WriteKind.ASSIGN | WriteKind.REQUEST | WriteKind.DECLINE:
            return _invalid(o, ev, "the leader's writes go to its duties")
        case _:
            assert_never(ev.kind)


def _result(o: Ownership, ev: ActionResult, ctx: Context) -> Step:
    match o.phase:
        case Phase.WRITING if ev.kind is o.writing:
            return _outcome_of_write(o, ev, ctx)
        case Phase.WRITING:
            return _invalid(o, ev, "not the write in flight")
        case (
            Phase.RUNNING
            | Phase.ASKED
            | Phase.STOPPING
            | Phase.HALTED
            | Phase.HALTED_ASKED
            | Phase.TRANSFERRING
            | Phase.RELEASING
            | Phase.ENDING
        ):
            return _invalid(o, ev, "no write in flight")
        case _:
            assert_never(o.phase)


def _outcome_of_write(o: Ownership, ev: ActionResult, ctx: Context) -> Step:
    match ev.result:
        case Result.OK:
            actions: list[Action] = []
            if ev.kind is WriteKind.TRANSFER:
                stream, shard = o.lease.stream, o.lease.shard_id
                actions.append(Metric("HandoffsCompleted", 1, stream, shard))
                if o.stop_asked_at is not None:
                    actions.append(
                        Metric("HandoffLatencyMs", (ctx.now - o.stop_asked_at) * 1000, stream, shard)
                    )
            return Step(None, actions, why="done")
        case Result.CONFLICT if ev.kind is WriteKind.TRANSFER:
            return Step(_moving(o, None), [], why="the successor left, or the lease moved: release instead")
        case Result.CONFLICT:
            return _lose(o, "the lease moved on without us")
        case Result.FAILED:
            failures = o.failures + 1
            back = replace(o, phase=_PHASES[ev.kind], writing=None, failures=failures)
            return Step(
                replace(back, due_at=ctx.now + ctx.backoff(failures)), [], why="sent again after a backoff"
            )
        case _:
            assert_never(ev.result)
