"""The ownership machine's vocabulary: its phases, its data, the events it hears and what a step returns.

The transitions are in ``ownership.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, assert_never

from consumer.leases.model import Lease
from consumer.lifecycle.messages import Action, ActionResult, ShardFinished, WriteKind
from consumer.records import Position

__all__ = [
    "AT_ONCE",
    "NEVER",
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
]

NEVER = float("inf")
AT_ONCE = float("-inf")


class Phase(enum.Enum):
    """Where one ownership stands."""

    RUNNING = "running"  # a shard consumer reads and delivers
    ASKED = "asked"  # running; the leader asked for it: stopped at ``due_at`` (one idle poll later)
    STOPPING = "stopping"  # asked to drain; waiting for its final checkpoint
    HALTED = "halted"  # the processor halted it: the lease is kept so that nobody skips the record
    HALTED_ASKED = "halted_asked"  # halted, and the leader asked for it: handed on at ``due_at``
    TRANSFERRING = "transferring"  # drained: the transfer to ``give_to`` is sent at ``due_at``
    RELEASING = "releasing"  # drained or failed: the release is sent at ``due_at``
    ENDING = "ending"  # SHARD_END checkpointed: marking the lease ENDED is sent at ``due_at``
    WRITING = "writing"  # the write ``writing`` is in flight: waiting for its result


@dataclass(frozen=True)
class Ownership:
    """One lease of ours and where it stands."""

    lease: Lease
    phase: Phase = Phase.RUNNING
    give_to: str | None = None  # ASKED, STOPPING for a hand-off, TRANSFERRING: the successor
    halted_at: Position | None = None
    stop_asked_at: float | None = None  # when the drain was asked (hand-off latency)
    due_at: float = NEVER  # ASKED phases: the hand-off's time; TRANSFERRING, RELEASING, ENDING: the write's
    failures: int = 0
    gave_up: bool = False  # released because it kept failing here: the leader offers it to others first
    writing: WriteKind | None = None  # WRITING: the write in flight

    @property
    def key(self) -> str:
        """The lease's key."""
        return self.lease.key

    @property
    def consuming(self) -> bool:
        """A shard consumer is running for it (it must be stopped before the lease can move)."""
        match self.phase:
            case Phase.RUNNING | Phase.ASKED | Phase.STOPPING:
                return True
            case (
                Phase.HALTED
                | Phase.HALTED_ASKED
                | Phase.TRANSFERRING
                | Phase.RELEASING
                | Phase.ENDING
                | Phase.WRITING
            ):
                return False
            case _:
                assert_never(self.phase)

    @property
    def halted(self) -> bool:
        """Its processor halted it (kept, or asked for and not yet handed on)."""
        return self.phase in (Phase.HALTED, Phase.HALTED_ASKED)

    @property
    def at_rest(self) -> bool:
        """Nothing is under way for it (running, or halted and kept)."""
        return self.phase in (Phase.RUNNING, Phase.HALTED)


# -- events ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """Our own (strongly consistent) read of the lease: as stored, None if absent."""

    lease: Lease | None


@dataclass(frozen=True)
class Due:
    """The ownership's ``due_at`` has come (the coordinator sends it then and only then)."""


@dataclass(frozen=True)
class Strand:
    """The leader's plan finds nobody to take this lease of ours: give it up."""


@dataclass(frozen=True)
class Unasked:
    """Shutting down, and nobody asked for the lease within half a lease: give it up."""


@dataclass(frozen=True)
class Finished:
    """The shard consumer ended; ``successor``: whom to hand the lease to if the outcome gives it up."""

    report: ShardFinished
    successor: str | None


@dataclass(frozen=True)
class Deadline:
    """The shutdown deadline passed: the worker leaves now."""


OwnEvent = Seen | Due | Strand | Unasked | Finished | ActionResult | Deadline


@dataclass(frozen=True)
class Context:
    """What a step may know besides the ownership and the event."""

    now: float
    me: str
    ask_delay: float  # a hand-off request is acted on this long after it is seen (the idle poll)
    backoff: Callable[[int], float]  # failures so far -> seconds before a failed write is sent again


class Verdict(enum.Enum):
    """What a step made of its event."""

    MOVED = "moved"  # a transition (possibly to the same phase, with new data)
    IGNORED = "ignored"  # nothing new for this phase
    INVALID = "invalid"  # the coordinator never sends this event in this phase


class Step(NamedTuple):
    """The ownership after an event (None: it ended), the actions, and why."""

    next: Ownership | None
    actions: list[Action]
    verdict: Verdict = Verdict.MOVED
    why: str = ""
