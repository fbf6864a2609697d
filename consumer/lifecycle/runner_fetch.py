"""The shard runner's fetching: a machine's ``Fetch`` answered from what was fetched ahead, by the fetch under
way, or by a new one on the fetch pool, after the reader's pacing slot (a timer, not a thread asleep); the
next fetch started while the batch in hand is delivered, up to the depth; a stop that drops them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from consumer.clock import Clock
from consumer.lifecycle.pools import Pool
from consumer.lifecycle.runner_slot import FetchDone, Message, Slot, Stop, TimerKind
from consumer.lifecycle.shard_messages import StopRequested
from consumer.retrieval.reader import Fetch

__all__ = ["Fetching"]


class Fetching:
    """The fetching half of ``ShardRunner`` (its scheduler's thread only)."""

    _clock: Clock
    _fetches: Pool

    def _timer(self, at: float, slot: Slot, kind: TimerKind, payload: Any = None) -> int:
        raise NotImplementedError

    def _post(self, key: str, message: Message) -> None:
        raise NotImplementedError

    def fetch(self, slot: Slot) -> None:
        """A machine's ``Fetch``: a result fetched ahead at once, else the one under way, else a new one."""
        if (answer := slot.work.begin_fetch()) is not None:
            slot.events.append(answer)
            return
        slot.want, slot.ahead_wanted = True, True
        if slot.ahead:
            self._hand(slot, slot.ahead.popleft())
        elif not slot.fetch_running:
            self._start_fetch(slot)

    def drop_ahead(self, slot: Slot) -> None:
        """Forget what was fetched ahead and a fetch under way that the machine does not wait on."""
        slot.ahead.clear()
        if not slot.want:
            slot.gen += 1
            slot.fetch_running = False

    # -- fetching --------------------------------------------------------------------------------------
    def _start_fetch(self, slot: Slot) -> None:
        reader = slot.work.reader
        assert reader is not None
        slot.fetch_running = True
        ready_at: Callable[[], float] | None = getattr(reader, "ready_at", None)
        if ready_at is not None and (at := ready_at()) > self._clock.monotonic():
            self._timer(at, slot, "pace", slot.gen)  # the pacing wait on the heap, not on a thread
            return
        self._submit_fetch(slot)

    def _submit_fetch(self, slot: Slot) -> None:
        reader, gen, key = slot.work.reader, slot.gen, slot.key
        assert reader is not None

        def run() -> None:
            item: Fetch | Exception | None
            try:
                item = reader.fetch()
            except Exception as exc:  # handed to the machine, whose retry policy decides
                item = exc
            self._post(key, FetchDone(gen, item))

        self._fetches.submit(run)

    def _fetched(self, slot: Slot, message: FetchDone) -> None:
        if message.gen != slot.gen:
            return  # fetched by a reader since interrupted or closed: dropped
        slot.fetch_running = False
        item = message.item
        if isinstance(item, Exception):
            slot.ahead_wanted = False  # nothing more until the machine asks again (its retry policy)
        elif item is not None and item.shard_end:
            slot.fetched_end = True
        if slot.want:
            self._hand(slot, item)
        else:
            slot.ahead.append(item)
            self._ahead(slot)

    def _hand(self, slot: Slot, item: Fetch | Exception | None) -> None:
        slot.want = False
        slot.events.append(slot.work.fetched(item))
        self._ahead(slot)

    def _ahead(self, slot: Slot) -> None:
        """The next fetch, run while the batch in hand is delivered (up to ``depth`` results kept)."""
        if (
            slot.fetch_running
            or slot.stopping
            or slot.fetched_end
            or not slot.ahead_wanted
            or len(slot.ahead) >= slot.host.depth
            or slot.work.reader is None
        ):
            return
        self._start_fetch(slot)

    def _stopped(self, slot: Slot, stop: Stop) -> None:
        slot.events.append(StopRequested(stop.reason))
        slot.stopping = True
        if stop.reader is None:
            return
        if stop.finishing:  # a call that hangs must not hold the hand-off
            slot.ahead.clear()
            self._timer(self._clock.monotonic() + slot.host.grace, slot, "grace", slot.gen)
        else:  # a stopping owner delivers none of it: the next starts at the checkpoint
            self._cut(slot)

    def _cut(self, slot: Slot) -> None:
        """Drop what was fetched ahead and the fetch under way (its call may still be running on the fetch
        pool: its result is dropped); a machine waiting on it gets nothing."""
        slot.ahead.clear()
        slot.gen += 1
        slot.fetch_running = False
        if slot.want:
            self._hand(slot, None)
