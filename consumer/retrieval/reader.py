"""What the shard loop needs from retrieval: ``fetch`` the next records; ``interrupt`` a blocked fetch from
another thread; ``close`` from the reading thread itself when done. ``FetchAhead`` runs the next fetch while
the loop delivers the current batch."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from consumer.config import RetrievalConfig
from consumer.records import Position, Record
from consumer.retrieval.kinesis import WireRecord, to_records

__all__ = ["Fetch", "FetchAhead", "ReaderBase", "ShardReader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetch:
    records: list[Record]
    shard_end: bool
    millis_behind_latest: int | None


class ShardReader(Protocol):
    """Reads one shard from a start position; records at or before it are never returned again."""

    def fetch(self) -> Fetch | None:
        """The next records, or ``None`` when there is nothing yet (e.g. an iterator was renewed). Raises
        ``TransientError`` for a failure worth retrying; the caller's retry policy decides when."""
        ...

    def interrupt(self) -> None:
        """From any thread, at any time: make a blocked or upcoming fetch return soon. Idempotent."""
        ...

    def close(self) -> None:
        """From the reading thread: release what the reader holds (a later fetch may open it again)."""
        ...


class ReaderBase:
    """Position tracking and record building shared by the polling and fan-out readers.

    Starting at a checkpoint uses AT_SEQUENCE_NUMBER and drops what was already done, which also resumes
    correctly in the middle of a KPL-aggregated record.
    """

    def __init__(
        self,
        stream: str,
        shard_id: str,
        config: RetrievalConfig,
        *,
        after: Position | None,
        initial_position: str,
    ) -> None:
        self._stream = stream
        self._shard = shard_id
        self._cfg = config
        self._after = after
        self._initial = initial_position  # used only while there is no position to resume from
        self._timestamp = config.initial_timestamp

    @staticmethod
    def _size(wire: Sequence[WireRecord]) -> int:
        """The bytes a response counts against the shard's read limit (2 MiB/s of data read)."""
        return sum(len(w["Data"]) for w in wire)

    def _accept(self, wire: Sequence[WireRecord]) -> list[Record]:
        records = to_records(self._stream, self._shard, wire)
        after = self._after
        if after is not None and records:
            # A shard's records come in order, so only a prefix can be at or before the last position
            # (the rest of an aggregate we resume inside, or a record fetched again after a renewal).
            skip = 0
            while skip < len(records) and not after < records[skip].position:
                skip += 1
            del records[:skip]
        if records:
            last = records[-1]
            self._after = Position(last.sequence_number, last.sub_sequence_number)
        return records

    def interrupt(self) -> None:
        return None

    def close(self) -> None:
        return None


_Ready = Fetch | BaseException | None


class FetchAhead:
    """A ``ShardReader`` whose next fetch runs on a helper thread while the loop delivers the current batch.

    At most ``depth`` results wait beyond the batch in hand, so memory stays flat; the inner reader paces
    its own calls (polling: one GetRecords per ``idle_time_between_reads``). Results come out in the order
    they were fetched, on the loop's thread: a failure is raised there, where the loop's retry policy
    decides when to try again; until then nothing more is fetched (no retries behind the policy's back),
    nor after the shard's end. ``interrupt`` drops whatever was fetched ahead (a stopping owner delivers
    none of it; the next owner starts at the checkpoint); ``close`` joins the helper thread.
    """

    def __init__(self, reader: ShardReader, depth: int, name: str) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self._reader = reader
        self._depth = depth
        self._name = name
        self._cond = threading.Condition(threading.Lock())
        self._ready: deque[_Ready] = deque()
        self._wanted = True  # false after a failure, until the loop asks again
        self._ended = False  # the shard's end was fetched: nothing follows it
        self._stopped = False
        self._loop_waits = False  # each side parks only on the condition, and says so
        self._helper_waits = False
        self._thread: threading.Thread | None = None

    def fetch(self) -> Fetch | None:
        with self._cond:
            if self._stopped:
                return None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            if not self._ready:
                if self._ended:
                    return None
                self._wanted = True
                self._wake_helper()
                while not self._ready and not self._stopped:
                    self._loop_waits = True
                    self._cond.wait()
                self._loop_waits = False
                if self._stopped:
                    return None
            item = self._ready.popleft()
            self._wake_helper()  # room for the next fetch
        if isinstance(item, BaseException):
            raise item
        return item

    def _wake_helper(self) -> None:
        if self._helper_waits:  # a notify costs a thread switch: only when someone is parked
            self._cond.notify_all()

    def interrupt(self) -> None:
        with self._cond:
            self._stopped = True
            self._ready.clear()
            self._cond.notify_all()
        self._reader.interrupt()

    def close(self) -> None:
        self.interrupt()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._reader.close()

    @property
    def buffered(self) -> int:
        """Results fetched ahead and not yet taken (for tests and metrics)."""
        with self._cond:
            return len(self._ready)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._wanted or len(self._ready) >= self._depth):
                    self._helper_waits = True
                    self._cond.wait()
                self._helper_waits = False
                if self._stopped:
                    return
            item: _Ready
            try:
                item = self._reader.fetch()
            except BaseException as exc:  # handed to the loop's thread, which decides
                item = exc
            with self._cond:
                if self._stopped:
                    return
                self._ready.append(item)
                if isinstance(item, BaseException):
                    self._wanted = False
                elif item is not None and item.shard_end:
                    self._wanted, self._ended = False, True
                if self._loop_waits:
                    self._cond.notify_all()
