from __future__ import annotations

import random
import threading
from datetime import UTC, datetime

import pytest

from consumer.checkpoint.checkpointer import OrderedTracker
from consumer.records import Position, Record


def _records(n: int) -> list[Record]:
    now = datetime.now(UTC)
    return [Record("s", "sh", str(1000 + i), 0, "pk", b"x", now) for i in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_watermark_is_highest_contiguous_done(seed: int) -> None:
    rng = random.Random(seed)
    tracker = OrderedTracker()
    records = tracker.track(_records(200))
    order = list(range(200))
    rng.shuffle(order)
    done: set[int] = set()
    for i in order:
        records[i].done()
        done.add(i)
        contiguous = 0
        while contiguous in done:
            contiguous += 1
        expected = records[contiguous - 1].position if contiguous else None
        assert tracker.watermark == expected
    assert tracker.pending == 0


def test_done_is_idempotent_and_ignored_after_close() -> None:
    tracker = OrderedTracker()
    a, b = tracker.track(_records(2))
    a.done()
    a.done()
    assert tracker.watermark == a.position
    tracker.close()
    b.done()
    assert tracker.watermark == a.position


def test_done_from_many_threads() -> None:
    tracker = OrderedTracker()
    records = tracker.track(_records(5000))
    chunks = [records[i::8] for i in range(8)]
    threads = [threading.Thread(target=lambda c=c: [r.done() for r in reversed(c)]) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tracker.watermark == Position(records[-1].sequence_number, 0)


def test_done_outside_manual_mode_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="manual"):
        _records(1)[0].done()
