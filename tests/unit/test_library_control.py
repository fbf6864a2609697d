"""A worker used out of order (stopped before it was started, started twice, asked to handle signals off the
main thread) raises ``WorkerStateError`` (a ``ConsumerError``) and is left as it was: it still starts and
consumes afterwards.

Before: ``stop()`` before ``start()`` queued a shutdown, so the worker started later stopped at once and
consumed nothing; ``start(handle_signals=True)`` off the main thread raised only after the worker's thread was
set, after which ``start()`` said "already started" and ``stop()`` waited for ever; each was a bare
``RuntimeError``."""

from __future__ import annotations

import threading
import time

import pytest

from consumer import ConsumerError, WorkerStateError
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.worker import Worker
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, make_worker


def _setup() -> tuple[Worker, InMemoryKinesis, Journal]:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 2)
    for i in range(10):
        kinesis.put("s", f"shardId-{i % 2:012d}", f"r{i}".encode())
    return make_worker("w", tables, kinesis, journal), kinesis, journal


def _consumes_everything(worker: Worker, journal: Journal) -> None:
    worker.start()
    deadline = time.monotonic() + 20
    while len(journal.sequences()) < 10:
        assert time.monotonic() < deadline, f"got {len(journal.sequences())} of 10"
        assert worker.running, "the worker stopped by itself"
        time.sleep(0.02)
    assert worker.stop(20)


def test_stop_or_join_before_start_is_refused_and_the_worker_still_runs() -> None:
    worker, _, journal = _setup()
    with pytest.raises(WorkerStateError, match="was not started"):
        worker.stop(1)
    with pytest.raises(WorkerStateError, match="was not started"):
        worker.join(1)
    _consumes_everything(worker, journal)


def test_a_second_start_is_refused() -> None:
    worker, _, journal = _setup()
    _consumes_everything(worker, journal)
    with pytest.raises(WorkerStateError, match="already started") as raised:
        worker.start()
    assert isinstance(raised.value, ConsumerError) and isinstance(raised.value, RuntimeError)


def test_handle_signals_off_the_main_thread_is_refused_and_the_worker_still_starts() -> None:
    worker, _, journal = _setup()
    errors: list[BaseException] = []

    def start_off_main() -> None:
        try:
            worker.start(handle_signals=True)
        except BaseException as exc:  # the assertion is on the main thread
            errors.append(exc)

    thread = threading.Thread(target=start_off_main)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], WorkerStateError), errors
    assert "main thread" in str(errors[0])
    assert not worker.running
    _consumes_everything(worker, journal)
