"""One lease this worker holds, as an explicit state machine (docs/protocol.md draws it).

    RUNNING ──give (asked by the leader) / shutdown──▶ STOPPING ──STOPPED──▶ TRANSFERRING ─ok─▶ gone
       │                           │                  (no successor: RELEASING ─ok─▶ gone)
       ├──SHARD_END───────────────▶ ENDING ─ok─▶ gone
       ├──HALTED──▶ HALTED (kept on purpose, marked for operators) ──give / shutdown──▶ TRANSFERRING
       ├──GAVE_UP / FAILED────────▶ TRANSFERRING to another live worker (none: RELEASING) ─ok─▶ gone
       └──LOST (any phase: the table shows another owner or epoch, or a fenced write) ──▶ gone
    (received while shutting down) ──▶ TRANSFERRING to a live worker (none: RELEASING), never started

A write that fails for a transient reason stays in its phase and is retried at ``retry_at``; one that loses
its condition means the lease moved on, so the ownership ends.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace

from consumer.leases.model import Lease
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    LeaseWrite,
    Metric,
    Outcome,
    Result,
    ShardFinished,
    Stop,
    WriteKind,
)
from consumer.lifecycle.processor import ShutdownReason
from consumer.records import Position

__all__ = ["HANDED_ON", "Ownership", "Phase", "finished", "give", "lose", "passing_on", "written"]


class Phase(enum.Enum):
    RUNNING = "running"  # a shard consumer reads and delivers
    STOPPING = "stopping"  # asked to drain; waiting for its final checkpoint
    HALTED = "halted"  # the processor halted it: the lease is kept so that nobody skips the record
    TRANSFERRING = "transferring"  # drained: moving the lease (and checkpoint epoch) to ``give_to``
    RELEASING = "releasing"  # drained or failed: giving the lease up for anyone to take
    ENDING = "ending"  # SHARD_END checkpointed: marking the lease ENDED


@dataclass(frozen=True)
class Ownership:
    lease: Lease
    phase: Phase = Phase.RUNNING
    give_to: str | None = None  # STOPPING for a hand-off, TRANSFERRING: the successor
    halted_at: Position | None = None
    stop_asked_at: float | None = None  # when the drain was asked (hand-off latency)
    retry_at: float = 0.0  # a write that failed transiently is sent again from then on
    failures: int = 0
    gave_up: bool = False  # released because it kept failing here: the leader offers it to others first

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def consuming(self) -> bool:
        """A shard consumer is running for it (it must be stopped before the lease can move)."""
        return self.phase in (Phase.RUNNING, Phase.STOPPING)

    def write(self) -> LeaseWrite | None:
        """The lease-table write this phase waits for, if any."""
        kind = _WRITES.get(self.phase)
        if kind is None:
            return None
        return LeaseWrite(kind, self.lease, to=self.give_to, halted_at=self.halted_at, given_up=self.gave_up)


_WRITES = {
    Phase.TRANSFERRING: WriteKind.TRANSFER,
    Phase.RELEASING: WriteKind.RELEASE,
    Phase.ENDING: WriteKind.END,
}

Step = tuple["Ownership | None", list[Action]]


def give(o: Ownership, to: str | None, now: float) -> Step:
    """Hand the lease to ``to`` (None: to whoever the shutdown picks later, or release)."""
    if o.phase is Phase.RUNNING:
        return replace(o, phase=Phase.STOPPING, give_to=to, stop_asked_at=now), [
            Stop(o.key, ShutdownReason.REQUESTED)
        ]
    if o.phase is Phase.HALTED:  # nothing to drain: the successor resumes before the failing record
        return _moving(replace(o, stop_asked_at=now), to), []
    return o, []  # already on its way out


def passing_on(lease: Lease, to: str | None) -> Ownership:
    """A lease received while shutting down: never started, handed straight on (or released)."""
    return _moving(Ownership(lease), to)


def lose(o: Ownership) -> Step:
    """The lease moved on without us (another owner or epoch in the table, or our write was fenced)."""
    actions: list[Action] = [Metric("LeasesLost", 1, o.lease.stream, o.lease.shard_id)]
    if o.consuming:
        actions.insert(0, Stop(o.key, ShutdownReason.LEASE_LOST))
    return None, actions


def _moving(o: Ownership, to: str | None) -> Ownership:
    phase = Phase.TRANSFERRING if to is not None else Phase.RELEASING
    return replace(o, phase=phase, give_to=to, retry_at=0.0, failures=0)


def _on_stopped(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    if o.phase is Phase.STOPPING:
        return _moving(o, o.give_to), []
    # Stopped without being asked (cannot happen today): keep nothing we cannot account for.
    return _moving(o, successor), []


def _on_halted(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    metric = Metric("ShardsHalted", 1, o.lease.stream, o.lease.shard_id)
    halted = replace(o, phase=Phase.HALTED, halted_at=ev.halted_at)
    if o.phase is Phase.STOPPING:  # halted while draining: hand it on as asked, halted
        return _moving(halted, o.give_to), [metric]
    return halted, [metric, LeaseWrite(WriteKind.HALT, o.lease, halted_at=ev.halted_at)]


def _on_give_up(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    """Failing here past the bound (or unexpectedly): let another worker try, at once if one is alive."""
    name = "ShardsGivenUp" if ev.outcome is Outcome.GAVE_UP else "ShardsFailed"
    if o.phase is Phase.STOPPING:  # a hand-off or shutdown was under way: it keeps its destination
        successor = o.give_to
    return _moving(replace(o, gave_up=True), successor), [Metric(name, 1, o.lease.stream, o.lease.shard_id)]


def _on_end(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    return replace(o, phase=Phase.ENDING, retry_at=0.0, failures=0), []


def _on_lost(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    return lose(replace(o, phase=Phase.RELEASING))  # its consumer already stopped: nothing to stop


# The transition table for a finished shard consumer: outcome -> what follows.
_FINISHED: dict[Outcome, Callable[[Ownership, ShardFinished, str | None], Step]] = {
    Outcome.STOPPED: _on_stopped,
    Outcome.SHARD_END: _on_end,
    Outcome.HALTED: _on_halted,
    Outcome.GAVE_UP: _on_give_up,
    Outcome.FAILED: _on_give_up,
    Outcome.LOST: _on_lost,
}


# Outcomes after which the lease goes to a successor the coordinator picks (unless a hand-off named one).
HANDED_ON = frozenset({Outcome.STOPPED, Outcome.GAVE_UP, Outcome.FAILED})


def finished(o: Ownership, ev: ShardFinished, successor: str | None) -> Step:
    """``successor``: the live worker to hand the lease to if this outcome gives it up (None: release)."""
    if ev.epoch != o.lease.epoch or not o.consuming:
        return o, []  # a consumer of an earlier ownership of ours
    return _FINISHED[ev.outcome](o, ev, successor)


def written(o: Ownership, ev: ActionResult, now: float, backoff: Callable[[int], float]) -> Step:
    """The result of this ownership's lease-table write."""
    if ev.kind is WriteKind.HALT:  # informational: a failure is only retried when the lease moves again
        return (replace(o, lease=ev.new) if ev.new is not None else o), []
    if ev.result is Result.OK:
        actions: list[Action] = []
        if ev.kind is WriteKind.TRANSFER:
            actions.append(Metric("HandoffsCompleted", 1, o.lease.stream, o.lease.shard_id))
        return None, actions
    if ev.result is Result.CONFLICT:
        if ev.kind is WriteKind.TRANSFER:  # the successor left, or the lease moved: try to release
            return _moving(o, None), []
        return lose(o)
    failures = o.failures + 1
    return replace(o, failures=failures, retry_at=now + backoff(failures)), []
