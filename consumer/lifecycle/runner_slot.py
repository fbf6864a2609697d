"""What the shard runner keeps per shard (``Slot``), what it drives (``Host``: a shard consumer), its timers
and the messages of its inbox; ``Slot.carry_out`` says which of the runner's hands each action goes to."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, assert_never

from consumer.lifecycle.messages import Metric
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.shard_messages import (
    Checkpoint,
    CloseReader,
    Deliver,
    EndShard,
    Fetch,
    Finish,
    NotifyShutdown,
    Setup,
    ShardAction,
    ShardEvent,
    WaitUntil,
)
from consumer.lifecycle.shard_work import ShardWork
from consumer.retrieval.reader import Fetch as Fetched
from consumer.retrieval.reader import ShardReader

if TYPE_CHECKING:
    from consumer.lifecycle.shard_runner import ShardRunner

__all__ = [
    "Crashed",
    "Ended",
    "FetchDone",
    "Host",
    "LaneFree",
    "Later",
    "Message",
    "Poke",
    "Slot",
    "Stop",
    "Timer",
    "TimerKind",
]


class Host(Protocol):
    """One shard consumer as the runner sees it."""

    @property
    def key(self) -> str:
        """Unique per shard consumer (one slot per key)."""
        ...

    @property
    def machine(self) -> ShardMachine: ...

    @property
    def work(self) -> ShardWork: ...

    @property
    def depth(self) -> int:
        """Fetch results kept ahead of the batch in hand (``retrieval.prefetch_batches``)."""
        ...

    @property
    def grace(self) -> float:
        """How long a requested stop lets the fetch the machine waits on run before it is interrupted."""
        ...

    def news(self) -> list[ShardEvent]:
        """What changed outside the machine's actions (validity, records done, checkpoints written)."""
        ...

    def ended(self, finish: Finish | None, error: Exception | None) -> None:
        """The machine finished (or a bug ended it): tell the processor and the coordinator; on the lane."""
        ...

    def metric(self, action: Metric) -> None:
        """Record a machine's metric."""
        ...


#: What a timer is for: a machine's wait, a poll's pacing slot, a stop's final-fetch grace, a processor's timer.
TimerKind = Literal["wait", "pace", "grace", "later"]


@dataclass(order=True)
class Timer:
    at: float
    seq: int
    key: str = field(compare=False)
    kind: TimerKind = field(compare=False)
    payload: Any = field(compare=False, default=None)


@dataclass(eq=False)
class Slot:
    """One shard's place in the runner (touched by the scheduler's thread only)."""

    host: Host
    events: list[ShardEvent] = field(default_factory=list)  # for the next step
    busy: bool = False  # a lane job is under way (a processor call or a checkpoint write)
    want: bool = False  # the machine waits on a fetch
    fetch_running: bool = False  # a fetch job is under way or waits for its pacing slot
    ahead: deque[Fetched | Exception | None] = field(default_factory=deque)  # fetched, not yet asked for
    ahead_wanted: bool = True  # false after a failure, until the machine asks again
    fetched_end: bool = False  # the shard's end was fetched: nothing follows it
    stopping: bool = False
    ending: bool = False
    gen: int = 0  # bumped when fetches under way are to be dropped (a stop, a closed reader, the end)
    wait: int | None = None  # the seq of the machine's wait timer
    callbacks: list[Callable[[], None]] = field(default_factory=list)  # processor timers due

    @property
    def key(self) -> str:
        """The host's key."""
        return self.host.key

    @property
    def work(self) -> ShardWork:
        """The shard's hands."""
        return self.host.work

    def carry_out(self, action: ShardAction, runner: ShardRunner) -> None:  # noqa: C901 - one case per action
        """Hand ``action`` to the runner (blocking work to a pool; its result comes back as an event)."""
        work = self.work
        match action:
            case Setup():
                runner.on_lane(self, work.setup)
            case Fetch():
                runner.fetch(self)
            case Deliver():
                runner.on_lane(self, work.deliver)
            case Checkpoint():
                position = action.position
                runner.on_lane(self, lambda: work.checkpoint(position))
            case NotifyShutdown():
                runner.on_lane(self, work.notify)
            case EndShard():
                runner.on_lane(self, work.end)
            case CloseReader():
                runner.drop_ahead(self)
                work.close_reader()
            case WaitUntil():
                work.behind = None  # a new round: a batch kept in hand was fetched in an earlier one
                runner.wait_until(self, action.at)
            case Metric():
                self.host.metric(action)
            case Finish():
                runner.end(self, action)
            case _:
                assert_never(action)


# -- what reaches the runner's inbox ----------------------------------------------------------------
@dataclass(frozen=True)
class FetchDone:
    """A fetch job's result (dropped when ``gen`` is not the slot's any more)."""

    gen: int
    item: Fetched | Exception | None


@dataclass(frozen=True)
class Stop:
    """The coordinator's stop of a shard."""

    reason: ShutdownReason
    reader: ShardReader | None
    finishing: bool  # a requested stop lets the fetch the machine waits on finish (within a grace)


@dataclass(frozen=True)
class Later:
    """A processor's timer, asked for."""

    delay: float
    callback: Callable[[], None]


@dataclass(frozen=True)
class Crashed:
    """A bug of ours in a lane job: the shard ends FAILED."""

    error: Exception


class LaneFree:
    """A processor timer's callback ran."""


class Ended:
    """The finish job ran: the shard is forgotten."""


class Poke:
    """Something the machine reads changed (records done, a checkpoint the processor wrote)."""


Message = ShardEvent | FetchDone | Stop | Later | Crashed | LaneFree | Ended | Poke | Host
