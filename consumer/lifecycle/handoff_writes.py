"""The hand-off writes of one coordinator step, side by side: a shutdown's releases and a scale-in's transfers
do not queue one behind another (each is a conditional write of its own lease)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from consumer.leases.repository import RELEASE_ALL_MAX
from consumer.lifecycle.messages import Event, LeaseWrite, WriteKind

__all__ = ["HANDOFF_WRITERS", "HandoffWriter"]

HANDOFF_WRITERS = 8  # hand-off writes under way at once


class HandoffWriter:
    """Carries out a run of hand-off writes on a small pool: each transfer is its own transaction (it wakes its
    successor); plain releases go ``RELEASE_ALL_MAX`` to a transaction (a shutdown of 128 leases is three
    writes, not 128), and a batch that did not go through is run again lease by lease, each with its answer."""

    def __init__(
        self,
        run: Callable[[LeaseWrite], Event | None],
        release_all: Callable[[Sequence[LeaseWrite]], list[Event] | None],
        name: str,
    ) -> None:
        self._run = run
        self._release_all = release_all
        self._pool = ThreadPoolExecutor(HANDOFF_WRITERS, thread_name_prefix=name)

    def write(self, writes: Sequence[LeaseWrite]) -> list[Event]:
        """Every write's event (those that have one); returns once all of them are answered."""
        plain = [w for w in writes if w.kind is WriteKind.RELEASE and not w.given_up]
        if len(plain) < 2:  # nothing to put together
            plain = []
        batches = [plain[i : i + RELEASE_ALL_MAX] for i in range(0, len(plain), RELEASE_ALL_MAX)]
        together = {id(w) for w in plain}
        single = [w for w in writes if id(w) not in together]
        ones = [self._pool.submit(self._run, w) for w in single]
        sent = [(batch, self._pool.submit(self._release_all, batch)) for batch in batches]
        events = _answers(ones)
        again: list[Future[Event | None]] = []
        for batch, future in sent:
            if (answered := future.result()) is not None:
                events += answered
            else:
                again += [self._pool.submit(self._run, w) for w in batch]
        return events + _answers(again)

    def close(self) -> None:
        """No more writes (one under way finishes on its own)."""
        self._pool.shutdown(wait=False)


def _answers(futures: list[Future[Event | None]]) -> list[Event]:
    return [e for f in futures if (e := f.result()) is not None]
