"""Checkpointers handed to processors, and the ordered tracker behind per-record manual checkpoints."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence

from consumer.checkpoint.store import CheckpointStore
from consumer.errors import CheckpointRejectedError, LeaseLostError, TransientError
from consumer.lifecycle.processor import LeaseGuard
from consumer.logs import log_event
from consumer.records import Position, Record

__all__ = ["CheckpointWriter", "Offload", "OrderedTracker", "ShardCheckpointer"]

logger = logging.getLogger(__name__)

#: Runs a blocking call (a checkpoint write) off the event loop and awaits it: the worker's
#: ``EventLoopThread.offload``, on threads of its own.
Offload = Callable[[Callable[[], None]], Awaitable[None]]


async def own_thread(call: Callable[[], None]) -> None:
    """``call`` on a new thread of its own, awaited: the ``Offload`` of a writer built without the worker's
    (never the loop's default executor, which the application's own work may fill)."""
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def run() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            call()
        except BaseException as exc:  # raised in the awaiting coroutine
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=run, name="checkpoint-write", daemon=True).start()
    await asyncio.wrap_future(done)


class OrderedTracker:
    """Per-shard completion tracking for manual mode.

    Records get consecutive indexes in delivery order; ``mark_done`` may arrive in any order from any
    thread and only takes a lock for a few dictionary operations (it never waits on I/O). The watermark is
    the position of the highest record such that it and every record before it are done.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._positions: dict[int, Position] = {}
        self._done: set[int] = set()
        self._next_index = 0
        self._head = 0  # lowest index not yet known done
        self._watermark: Position | None = None
        self._closed = False
        self._listener: Callable[[], None] | None = None

    def listen(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the thread marking done, outside the lock) when the watermark advances."""
        self._listener = listener

    def track(self, records: Sequence[Record]) -> Sequence[Record]:
        """Give each record its ``done()``: the records themselves, not copies (each is tracked once)."""
        with self._lock:
            idx = self._next_index
            for r in records:
                r._attach(self, idx)
                self._positions[idx] = Position(r.sequence_number, r.sub_sequence_number)
                idx += 1
            self._next_index = idx
        return records

    def mark_done(self, index: int) -> None:
        with self._lock:
            if self._closed or index < self._head or index not in self._positions:
                return
            self._done.add(index)
            head = self._head
            while self._head in self._done:
                self._done.discard(self._head)
                self._watermark = self._positions.pop(self._head)
                self._head += 1
            advanced = self._head != head
        if advanced and (listener := self._listener) is not None:
            listener()

    @property
    def watermark(self) -> Position | None:
        with self._lock:
            return self._watermark

    @property
    def pending(self) -> int:
        with self._lock:
            return self._next_index - self._head

    def close(self) -> None:
        """After a lost lease: later ``done()`` calls are ignored."""
        with self._lock:
            self._closed = True


class CheckpointWriter:
    """Writes one shard's checkpoint with the lease's epoch; a fenced write means the lease is lost."""

    def __init__(
        self,
        store: CheckpointStore,
        stream: str,
        shard_id: str,
        guard: LeaseGuard,
        last: Position | None,
        on_lost: Callable[[], None],
        on_saved: Callable[[Position], None] | None = None,
        offload: Offload = own_thread,
    ) -> None:
        """``offload``: where ``acheckpoint`` runs the write (the worker's write threads)."""
        self._store = store
        self.offload = offload
        self._stream = stream
        self._shard = shard_id
        self._guard = guard
        self.last = last
        self._on_lost = on_lost
        self._on_saved = on_saved
        self._lock = threading.Lock()
        self.pending: Position | None = None  # a write that failed transiently, to be sent again
        self.handed: Position | None = None  # the last record handed to the processor (``hand``)

    def hand(self, last: Position) -> None:
        """The processor is about to be given records up to ``last``: the furthest it may checkpoint."""
        if self.handed is None or self.handed < last:
            self.handed = last

    def write(self, pos: Position) -> None:
        """Save ``pos``. A transient failure leaves it ``pending`` and raises ``TransientError``.

        A position at or behind ``last`` is already saved for this ownership: nothing is sent (the store would
        refuse one behind as going backwards), whoever asks (the shard's machine, a no-argument ``checkpoint()``
        whose default lags a ``checkpoint(record)`` made before it, a retry's record checkpointed again)."""
        with self._lock:
            if self.covers(pos):
                return
            self._guard.ensure_valid()
            try:
                self._store.save(self._stream, self._shard, self._guard.epoch, pos)
            except TransientError:
                if self.pending is None or self.pending < pos:
                    self.pending = pos
                raise
            except CheckpointRejectedError as exc:
                if exc.stale_epoch:
                    self._on_lost()
                    raise LeaseLostError(f"{self._stream}/{self._shard}: {exc}") from exc
                raise
            self.last = pos
            if self.pending is not None and not self.last < self.pending:
                self.pending = None
        if self._on_saved is not None:
            self._on_saved(pos)

    def covers(self, pos: Position) -> bool:
        """Whether ``pos`` is at or behind what this ownership last saved (``write`` skips it)."""
        last = self.last
        return last is not None and not last < pos

    def ensure_valid(self) -> None:
        """``LeaseLostError`` unless this ownership's lease is still provably ours."""
        self._guard.ensure_valid()

    def check_own(self, record: Record) -> None:
        """Raise ``ValueError`` unless ``record`` was read from this writer's shard."""
        if (record.stream, record.shard_id) != (self._stream, self._shard):
            raise ValueError(
                f"checkpoint({record.stream}/{record.shard_id} record {record.position}) on the checkpointer "
                f"of {self._stream}/{self._shard}: checkpoint a record with its own shard's checkpointer"
            )

    def allowed(
        self,
        position: Position | Record,
        *,
        at_end: bool,
        redelivered_after: Callable[[], Position | None] = lambda: None,
    ) -> Position:
        """``position`` as the processor may checkpoint it, or a ``TypeError``/``ValueError`` saying why not
        (the KCL's range check): a record of this shard, or a position no further than the last record
        handed to the processor (or the one the ownership started at); SHARD_END only once the shard has
        ended (``at_end``: the ``shard_ended`` callback). Behind the last checkpoint (the KCL's lower bound):
        refused with ``CheckpointRejectedError`` at once, as the store would refuse it, unless it is after
        ``redelivered_after`` (what the callback's no-argument checkpoint saves, in auto mode the end of the
        batch before the one in hand; None: nothing yet), as a record that a retry handed again after the
        processor checkpointed it is: already saved, and ``write`` skips it. Nothing is written when it raises."""
        if isinstance(position, Record):
            self.check_own(position)
            return self._not_behind(position.position, redelivered_after)
        if not isinstance(position, Position):
            hint = (
                " (wrap a sequence number as Position(sequence_number))" if isinstance(position, str) else ""
            )
            raise TypeError(
                f"checkpoint() takes a Record, a Position or nothing; got {type(position).__name__} "
                f"{position!r:.80}{hint}"
            )
        where = f"{self._stream}/{self._shard}"
        if position.is_shard_end:
            if not at_end:
                raise ValueError(
                    f"checkpoint(SHARD_END) on {where} outside shard_ended: the shard is not read to its end, "
                    "and SHARD_END would end it for every later owner (checkpoint() with no argument "
                    "checkpoints what was delivered)"
                )
            return position
        if not (position.sequence.isascii() and position.sequence.isdigit()):
            raise ValueError(
                f"checkpoint({position}) on {where}: {position.sequence!r:.80} is not a sequence number"
            )
        furthest = max((p for p in (self.handed, self.last) if p is not None), default=None)
        if furthest is None or furthest < position:
            raise ValueError(
                f"checkpoint({position}) on {where}: past the last record handed to the processor "
                f"({furthest or 'none yet'}); a checkpoint there would skip records never delivered"
            )
        return self._not_behind(position, redelivered_after)

    def _not_behind(self, position: Position, redelivered_after: Callable[[], Position | None]) -> Position:
        """``position``, unless it is behind the last checkpoint and not a record a retry handed again."""
        last = self.last
        if last is None or not position < last:
            return position
        floor = redelivered_after()
        if floor is None or floor < position:
            return position  # checkpointed before this retry handed it again: ``write`` skips it
        self._guard.ensure_valid()  # an ownership that is over says so (``LeaseLostError``), as a write would
        raise CheckpointRejectedError(
            f"checkpoint({position}) on {self._stream}/{self._shard}: behind this ownership's last checkpoint "
            f"({last}); a checkpoint never moves back (checkpoint() with no argument saves what is done)",
            stale_epoch=False,
        )

    def view(
        self, default_position: Callable[[], Position | None], *, at_end: bool = False
    ) -> ShardCheckpointer:
        """The ``Checkpointer`` of one callback; ``at_end``: ``shard_ended``'s, the one that may write SHARD_END."""
        return ShardCheckpointer(self, default_position, at_end)


class ShardCheckpointer:
    """The ``Checkpointer`` a callback receives; with no argument it checkpoints its default position
    (what was delivered, what is done, or SHARD_END, depending on the callback)."""

    def __init__(
        self, writer: CheckpointWriter, default_position: Callable[[], Position | None], at_end: bool = False
    ) -> None:
        self._writer = writer
        self._default = default_position
        self._at_end = at_end

    @property
    def last_checkpoint(self) -> Position | None:
        return self._writer.last

    async def acheckpoint(self, position: Position | Record | None = None) -> None:
        """``checkpoint`` from a coroutine: the write runs on the worker's own write threads (never the
        loop's default executor, where it would queue behind the application's ``to_thread`` work). Refused
        as ``checkpoint`` refuses, before anything is offloaded; once the ownership is over, ``LeaseLostError``."""
        if position is not None:
            self._writer.allowed(position, at_end=self._at_end, redelivered_after=self._default)
        self._writer.ensure_valid()
        await self._writer.offload(lambda: self.checkpoint(position))

    def checkpoint(self, position: Position | Record | None = None) -> None:
        """Checkpoint ``position`` (a record or position), or the callback's default position.

        At or behind this ownership's last checkpoint it is already saved: nothing is written, no error (the
        default position, which may lag a ``checkpoint(record)`` made before it; a record that a retry of
        ``process_records`` handed again after the processor checkpointed it). Refused, with nothing written
        (``CheckpointWriter.allowed``): a record of another shard and a position past the last record handed to
        the processor (``ValueError``: it would skip records), SHARD_END outside ``shard_ended``
        (``ValueError``), anything but a ``Record`` or ``Position`` (``TypeError``), and a position behind the
        last checkpoint from before the batch in hand (``CheckpointRejectedError``, raised at once: a checkpoint
        never moves back; as the KCL's range check)."""
        pos = (
            None
            if position is None
            else self._writer.allowed(position, at_end=self._at_end, redelivered_after=self._default)
        )
        if pos is None:
            pos = self._default()
        if pos is None:
            return
        self._writer.ensure_valid()  # fenced even when ``pos`` is the one stored (a write would be skipped)
        try:
            self._writer.write(pos)
        except TransientError as exc:  # kept pending: the shard loop sends it again with backoff
            log_event(logger, "checkpoint_deferred", logging.WARNING, position=str(pos), error=str(exc))
