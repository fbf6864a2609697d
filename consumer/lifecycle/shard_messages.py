"""What the shard machine hears (events, reported by the shell) and asks for (actions, carried out by it).

The machine is in ``shard_machine.py``; its state and phases in ``shard_model.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from consumer.lifecycle import retry
from consumer.lifecycle.messages import Metric, Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_model import Mode
from consumer.records import Position

__all__ = [
    "Checkpoint",
    "CheckpointFailed",
    "CheckpointWritten",
    "CloseReader",
    "Deliver",
    "Delivered",
    "DeliveryHalted",
    "DeliveryInterrupted",
    "EndShard",
    "Fetch",
    "FetchFailed",
    "Fetched",
    "Finish",
    "NotStarted",
    "NotifyShutdown",
    "Setup",
    "SetupFailed",
    "ShardAction",
    "ShardEndCalled",
    "ShardEvent",
    "ShutdownNotified",
    "Started",
    "StopRequested",
    "Tick",
    "ValidityChanged",
    "WaitUntil",
    "WatermarkAdvanced",
    "WindowClosed",
    "WriterChanged",
]


# -- events (what the shell reports) ---------------------------------------------------------------------
@dataclass(frozen=True)
class Started:
    """Setup is done: the checkpoint read (``start``), the processor initialized in ``mode``."""

    start: Position | None
    mode: Mode


@dataclass(frozen=True)
class NotStarted:
    """Setup found nothing to do: the lease moved (LOST) or the shard is already finished (SHARD_END)."""

    outcome: Outcome


@dataclass(frozen=True)
class SetupFailed:
    """Setup raised; ``verdict`` is ``retry.verdict`` of the error."""

    verdict: retry.Verdict
    error: str = ""


@dataclass(frozen=True)
class Fetched:
    """A fetch returned ``count`` records (the last at ``last``), or ``None`` if ``nothing`` came back
    (interrupted, or an iterator renewed)."""

    count: int
    last: Position | None = None
    shard_end: bool = False
    nothing: bool = False


@dataclass(frozen=True)
class FetchFailed:
    """A fetch raised; ``verdict`` is ``retry.verdict`` of the error."""

    verdict: retry.Verdict
    error: str = ""


@dataclass(frozen=True)
class Delivered:
    """The batch in hand is processed (or dead-lettered); ``took``: how long each processor call took."""

    took: tuple[float, ...] = ()


@dataclass(frozen=True)
class DeliveryHalted:
    """A record kept failing (halt policy, or its dead-letter send failed): the shard halts at ``at``;
    ``before`` is the last record of the batch before it, if any."""

    at: Position | None
    before: Position | None
    took: tuple[float, ...] = ()


@dataclass(frozen=True)
class DeliveryInterrupted:
    """A stop ended the processor's retries: the batch stays in hand, undelivered."""

    took: tuple[float, ...] = ()


@dataclass(frozen=True)
class WatermarkAdvanced:
    """Manual mode: records were marked done (``watermark``), ``pending`` are delivered and not done."""

    watermark: Position | None
    pending: int


@dataclass(frozen=True)
class CheckpointWritten:
    """The machine's checkpoint action stored ``position``."""

    position: Position


@dataclass(frozen=True)
class CheckpointFailed:
    """The machine's checkpoint action failed; ``verdict`` is ``retry.verdict`` of the error."""

    position: Position
    verdict: retry.Verdict
    error: str = ""


@dataclass(frozen=True)
class WriterChanged:
    """The processor's own checkpoint calls moved the stored checkpoint or left one to resend."""

    written: Position | None
    deferred: Position | None


@dataclass(frozen=True)
class ShutdownNotified:
    """The processor's shutdown_requested returned (or raised: user code, logged by the shell)."""


@dataclass(frozen=True)
class ShardEndCalled:
    """The processor's shard_ended returned (its checkpoint, if any, came as ``WriterChanged``)."""


@dataclass(frozen=True)
class WindowClosed:
    """An action found our window closed (``LeaseLostError``); ``lost``: the lease is known gone."""

    lost: bool


@dataclass(frozen=True)
class StopRequested:
    """The coordinator's one call: drain (REQUESTED) or stop at once (LEASE_LOST)."""

    reason: ShutdownReason


@dataclass(frozen=True)
class ValidityChanged:
    """Our heartbeat window opened or closed, or moved its end (``window_ends``, monotonic seconds)."""

    valid: bool
    window_ends: float


@dataclass(frozen=True)
class Tick:
    """Time passed (a wait ended); the step reads the time from its ``now``."""


ShardEvent = (
    Started
    | NotStarted
    | SetupFailed
    | Fetched
    | FetchFailed
    | Delivered
    | DeliveryHalted
    | DeliveryInterrupted
    | WatermarkAdvanced
    | CheckpointWritten
    | CheckpointFailed
    | WriterChanged
    | ShutdownNotified
    | ShardEndCalled
    | WindowClosed
    | StopRequested
    | ValidityChanged
    | Tick
)


# -- actions (what the shell carries out) -----------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """Read the checkpoint, build and initialize the processor."""


@dataclass(frozen=True)
class Fetch:
    """Fetch the next records (opening the reader after the last record taken, if closed)."""


@dataclass(frozen=True)
class Deliver:
    """Deliver the batch in hand."""


@dataclass(frozen=True)
class Checkpoint:
    """Write ``position`` as the shard's checkpoint."""

    position: Position


@dataclass(frozen=True)
class CloseReader:
    """Release what the reader holds (a suspension: the next owner may need the subscription)."""


@dataclass(frozen=True)
class NotifyShutdown:
    """Call the processor's shutdown_requested."""


@dataclass(frozen=True)
class EndShard:
    """Call the processor's shard_ended (its checkpointer's default position is SHARD_END)."""


@dataclass(frozen=True)
class WaitUntil:
    """Step again at ``at`` (monotonic seconds), or as soon as a stop comes."""

    at: float


@dataclass(frozen=True)
class Finish:
    """The consumer ended: report ``outcome`` (LOST: tell the processor its lease is lost)."""

    outcome: Outcome
    halted_at: Position | None = None
    detail: str = ""


ShardAction = (
    Setup
    | Fetch
    | Deliver
    | Checkpoint
    | CloseReader
    | NotifyShutdown
    | EndShard
    | WaitUntil
    | Finish
    | Metric
)
