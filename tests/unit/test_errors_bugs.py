"""A bug surfaces once, with its traceback: neither retried for ever as if it might pass, nor logged on every
attempt, nor only as a one-line ``repr`` that hides where it came from.

Bugs are injected where they would really come from: a processor's ``process_records`` (user code), a dead-letter
queue's ``send`` and a checkpoint store's ``put`` (ours)."""

from __future__ import annotations

import logging
import queue
import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.checkpoint.memory import InMemoryCheckpointStore
from consumer.clock import FakeClock
from consumer.config import ProcessingConfig, RetrievalConfig
from consumer.leases.memory import InMemoryLeaseRepository, InMemoryTables
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.lifecycle.effects import Effects
from consumer.lifecycle.messages import Discover, Discovered, Outcome, ShardFinished
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import Journal, lone_shard_consumer, make_worker, wait_until

CFG = ProcessingConfig(max_attempts=3, backoff_base=0.001, backoff_max=0.001)


def _records(n: int) -> list[Record]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [Record("s", "shard-0", str(i), 0, "k", b"x", at) for i in range(1, n + 1)]


def _tracebacks(caplog: pytest.LogCaptureFixture, error: BaseException) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None and r.exc_info[1] is error]


def test_a_processor_bug_that_halts_the_shard_is_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bug = TypeError("unsupported operand type(s) for +: 'int' and 'str'")
    calls = 0

    def process(records: Any) -> None:
        nonlocal calls
        calls += 1
        raise bug

    with caplog.at_level(logging.INFO):
        result = deliver(_records(2), process, CFG, None, 1, threading.Event(), InMemoryMetrics())
    assert result.outcome is DeliveryOutcome.HALT
    assert calls == CFG.max_attempts * 2  # the batch, then its first record alone: bounded, never for ever
    shown = _tracebacks(caplog, bug)
    assert [r.getMessage() for r in shown] == ["shard_halted"], "the traceback, once, with the halt"


class _BrokenQueue:
    """A dead-letter queue with a bug of ours in it."""

    def __init__(self) -> None:
        self.bug = KeyError("QueueUrl")

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        raise self.bug


def test_a_dead_letter_queue_bug_halts_the_shard_and_is_logged_once_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dlq = _BrokenQueue()
    cfg = ProcessingConfig(
        max_attempts=1, backoff_base=0.001, backoff_max=0.001, on_failure="dlq", dlq_url="http://q"
    )

    def process(records: Any) -> None:
        raise ValueError("bad record")

    with caplog.at_level(logging.INFO):
        result = deliver(_records(1), process, cfg, dlq, 1, threading.Event(), InMemoryMetrics())
    assert result.outcome is DeliveryOutcome.HALT
    assert [r.getMessage() for r in _tracebacks(caplog, dlq.bug)] == ["dead_letter_failed"]


class _Quiet(BaseProcessor):
    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


def test_a_checkpoint_store_bug_ends_the_shard_failed_at_once_with_one_traceback(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    bug = KeyError("epoch")  # say, a field read under the wrong name
    saves = 0

    def save(*args: Any) -> None:
        nonlocal saves
        saves += 1
        raise bug

    monkeypatch.setattr(InMemoryCheckpointStore, "save", save)
    kinesis = InMemoryKinesis()
    retrieval = RetrievalConfig(
        idle_time_between_reads=0.01, backoff_base=0.01, backoff_max=0.02, reads_per_second=100
    )
    consumer, finished, _, shard = lone_shard_consumer(kinesis, _Quiet, retrieval)
    kinesis.put("s", shard, b"x")
    with caplog.at_level(logging.INFO):
        consumer.start()
        done: ShardFinished = finished.get(timeout=10)
        consumer.join(5)
    assert done.outcome is Outcome.FAILED and "KeyError" in done.detail
    assert saves == 1, "a bug was retried as if it might pass"
    assert len(_tracebacks(caplog, bug)) == 1
    with pytest.raises(queue.Empty):
        finished.get_nowait()


class _Queue:
    def __init__(self) -> None:
        self.sent: list[Record] = []

    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        self.sent.append(record)


def test_a_processor_bug_that_dead_letters_a_batch_shows_its_traceback_once_for_the_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bug = AttributeError("'NoneType' object has no attribute 'get'")
    cfg = ProcessingConfig(
        max_attempts=2, backoff_base=0.001, backoff_max=0.001, on_failure="dlq", dlq_url="http://q"
    )

    def process(records: Any) -> None:
        raise bug

    dlq = _Queue()
    with caplog.at_level(logging.INFO):
        result = deliver(_records(3), process, cfg, dlq, 1, threading.Event(), InMemoryMetrics())
    assert result.outcome is DeliveryOutcome.DONE and len(dlq.sent) == 3
    lines = [r for r in caplog.records if r.getMessage() == "dead_lettered"]
    assert len(lines) == 3  # one line per record, as before
    assert [r.getMessage() for r in _tracebacks(caplog, bug)] == ["dead_lettered"]


class _BuggyDeregister(InMemoryLeaseRepository):
    """A lease repository whose last call, removing our worker item, has a bug."""

    def __init__(self, tables: InMemoryTables) -> None:
        super().__init__(tables)
        self.bug = TypeError("deregister_worker() got an unexpected keyword argument 'epoch'")

    def deregister_worker(self, worker_id: str) -> None:
        raise self.bug


def test_a_bug_in_the_last_step_of_leaving_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kinesis = InMemoryKinesis()
    kinesis.create_stream("s", 1)
    repos: list[_BuggyDeregister] = []

    def wrap(repo: InMemoryLeaseRepository) -> _BuggyDeregister:
        repos.append(_BuggyDeregister(repo.t))
        return repos[-1]

    worker = make_worker("w1", InMemoryTables(), kinesis, Journal(), wrap_repo=wrap)
    with caplog.at_level(logging.INFO):
        worker.start()
        wait_until(lambda: any(r.getMessage() == "shard_started" for r in caplog.records), what="a shard")
        worker.request_shutdown()
        assert worker.join(10.0)  # the worker still leaves: nothing is left for it to do about it
    assert [r.getMessage() for r in _tracebacks(caplog, repos[0].bug)] == ["deregister_failed"]


class _BuggyListing(InMemoryKinesis):
    """ListShards with a bug behind it (say, a page token read under the wrong name), until ``fixed``."""

    def __init__(self) -> None:
        super().__init__()
        self.bug = KeyError("NextToken")
        self.fixed = False

    def list_shards(self, stream: str) -> Any:
        if not self.fixed:
            raise self.bug
        return super().list_shards(stream)


def test_a_discovery_bug_is_loud_every_time_but_shows_its_traceback_once_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kinesis = _BuggyListing()
    kinesis.create_stream("s", 1)
    tables = InMemoryTables()
    nobody: Any = None
    effects = Effects(
        "w1", InMemoryLeaseRepository(tables), kinesis, ("s",), nobody, nobody, InMemoryMetrics(), FakeClock()
    )
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            assert effects.run(Discover((), ("s",))) == Discovered(False, False, frozenset(), frozenset())
        refused = [r for r in caplog.records if r.getMessage() == "discovery refused"]
        assert len(refused) == 3  # the worker goes on without it: said every time
        assert len(_tracebacks(caplog, kinesis.bug)) == 1, "a traceback per attempt buries the log"
        kinesis.fixed = True
        assert effects.run(Discover((), ("s",))).listed == frozenset({"s"})  # type: ignore[union-attr]
        kinesis.fixed = False
        effects.run(Discover((), ("s",)))
    assert len(_tracebacks(caplog, kinesis.bug)) == 2  # a new episode shows it again
