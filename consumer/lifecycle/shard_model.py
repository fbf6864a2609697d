"""The shard machine's state: its phases and stages, the rules it is given, and what a transition returns.

The transitions are in ``shard_machine.py``, the events and actions in ``shard_messages.py``. Names follow the KCL's ``ConsumerStates`` (initializing,
processing, shutting down, shutdown complete), kept small: the machine holds no records and no I/O, only
positions, counts and times, so that every step can be replayed on made-up time.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.ownership_model import AT_ONCE, NEVER, Verdict
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.retry_digest import RetryDigest
from consumer.records import Position

__all__ = ["AT_ONCE", "NEVER", "Mode", "Phase", "Rules", "ShardState", "Stage", "Step", "Verdict", "Work"]


class Phase(enum.Enum):
    """Where one shard's consumption stands."""

    STARTING = "starting"  # the checkpoint read and the processor's initialize are not done yet
    READING = "reading"  # rounds of: resend a deferred checkpoint, fetch, deliver, checkpoint what is due
    SUSPENDED = "suspended"  # our heartbeat window is closed: hold nothing, wait for it to open (``resume``)
    DRAINING = "draining"  # a requested stop: shutdown_requested, wait for done records, final checkpoint
    ENDING = "ending"  # the shard's end is delivered: wait for done records, shard_ended, SHARD_END written
    FINISHED = "finished"  # ended with ``outcome``: nothing more happens


class Stage(enum.Enum):
    """Where a phase stands within itself (a round of READING, the steps of DRAINING and ENDING)."""

    TOP = "top"  # READING: between rounds (stop and validity are looked at here, and only here)
    FLUSH = "flush"  # a checkpoint that failed transiently is sent again first
    FETCH = "fetch"  # nothing in hand: fetch (unless manual mode's pending records are at the cap)
    DELIVER = "deliver"  # a batch in hand: deliver it if our window leaves the time a batch takes
    SAVE = "save"  # write the checkpoint if it is due
    CLOSE = "close"  # the round is over: SHARD_END reached, or back to TOP
    NOTIFY = "notify"  # DRAINING: the processor's shutdown_requested
    WAIT_DONE = "wait_done"  # DRAINING, ENDING: manual mode waits for delivered records to be done
    FINAL = "final"  # DRAINING: the final checkpoint, retried until its own deadline
    CALL = "call"  # ENDING: the processor's shard_ended
    CHECK = "check"  # ENDING: SHARD_END must be written (resent if deferred), or the shard halts


class Mode(enum.Enum):
    """Who decides the checkpoint: the loop after each batch, the records marked done, or the processor."""

    AUTO = "auto"
    MANUAL = "manual"
    EXPLICIT = "explicit"


class Work(enum.Enum):
    """The one action in flight: the shell reports its result before the machine asks for anything else."""

    SETUP = "setup"
    FETCH = "fetch"
    DELIVER = "deliver"
    CHECKPOINT = "checkpoint"
    NOTIFY = "notify"
    END = "end"


@dataclass(frozen=True)
class Rules:
    """What the machine is told once: the configured bounds, and the jitter it multiplies backoffs by."""

    stream: str
    shard: str
    epoch: int
    backoff_base: float
    backoff_max: float
    give_up_after: float  # seconds of failures (never throttles) after which the shard is given up
    auto_interval: float  # auto mode: the least time between two checkpoints
    flush_interval: float  # manual mode: the same while batches keep coming
    max_pending: int  # manual mode: no fetch while this many delivered records are not done
    final_timeout: float  # a drain's wait for done records, then its final checkpoint's own deadline
    window: float  # the longest our heartbeat window can be
    jitter: Callable[[], float] = field(default=lambda: 1.0, compare=False)  # in [0, 1): 0.5x to 1x
    recheck: float = 0.05  # a suspension waiting for our window
    # Paused fetching, a drain or an end waiting for records done: the shell is woken by done() itself, so
    # this is only a fallback look (the runner sets it longer).
    done_wait: float = 0.05
    room_recheck: float = 0.02  # a batch waiting for room in our window
    final_retry: float = 0.1  # between two tries of the final checkpoint
    # Where retries are told (the worker's shards share one: a bounded number of lines whatever their number).
    retries: RetryDigest = field(default_factory=RetryDigest, compare=False)


@dataclass(frozen=True)
class ShardState:
    """One shard consumer's whole state; ``ShardMachine.step`` replaces it, never edits it."""

    phase: Phase = Phase.STARTING
    stage: Stage = Stage.TOP
    resume: Phase = Phase.STARTING  # SUSPENDED: where to go back to once our window opens
    awaiting: Work | None = None
    wake_at: float = AT_ONCE  # the end of a wait under way (backoff, recheck); a stop ends it early
    stop: ShutdownReason | None = None
    valid: bool = True
    window_ends: float = NEVER  # when our heartbeat window closes
    mode: Mode = Mode.AUTO
    held: int = 0  # records in hand (the shell holds them), not yet delivered
    held_last: Position | None = None
    shard_end: bool = False  # the last fetch reached the shard's end
    processed: Position | None = None  # auto: the last record delivered (or dead-lettered)
    watermark: Position | None = None  # manual: every record up to here is done
    pending: int = 0  # manual: delivered and not done
    written: Position | None = None  # the checkpoint as stored
    deferred: Position | None = None  # a checkpoint write that failed transiently, to send again
    saved_at: float = 0.0  # when the loop last saved (the intervals count from here)
    took: tuple[float, ...] = ()  # how long the last batches took
    failures: int = 0
    failing_since: float | None = None  # first failure (not a throttle) since the last good round
    paused_at: float | None = None  # manual: fetching paused at the cap since
    room_wait: bool = False  # a batch waits for room in our window
    ended: bool = False  # shard_ended was called
    halting: bool = False  # a record halted the shard: what came before it is checkpointed, then HALTED
    deadline: float = NEVER  # DRAINING: the wait for done records, then the final checkpoint's
    outcome: Outcome | None = None  # FINISHED
    halted_at: Position | None = None
    detail: str = ""


class Step(NamedTuple):
    """What one event did to the state: the state after it, the verdict, and why."""

    state: ShardState
    verdict: Verdict = Verdict.MOVED
    why: str = ""
