"""A processor that raises a ``BaseException`` that is not an ``Exception`` (``asyncio.CancelledError`` from
code that runs asyncio inside a synchronous callback, ``KeyboardInterrupt``, ``SystemExit`` from
``sys.exit()``): the call's failure like any other (``CallbackAbortedError``), retried, then dead-lettered or
the shard halted, with a log line and its traceback; the pool's threads and the other shards go on.

The workers here have one processor thread (``threads.processor_threads=1``): a pool thread that such an
exception ended would hold up every shard of the worker, not only the failing one."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from consumer.config import CheckpointConfig, ProcessingConfig, ThreadsConfig
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.pools import GrowingPool
from consumer.lifecycle.processor import (
    CallbackAbortedError,
    InitializationInput,
    ProcessRecordsInput,
    ShutdownRequestedInput,
)
from consumer.retrieval.memory import InMemoryKinesis
from consumer.sinks.dlq import InMemoryDeadLetterQueue

from .helpers import AsyncRecordingProcessor, Journal, RecordingProcessor, make_worker, start, wait_until

ABORTS = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)
ONE_THREAD = ThreadsConfig(processor_threads=1)
ROOT = Path(__file__).resolve().parents[2]


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def _two_shards(kinesis: InMemoryKinesis) -> tuple[str, str]:
    kinesis.create_stream("s", 2)
    first, second = (s.shard_id for s in kinesis.list_shards("s"))
    return first, second


class Aborting(RecordingProcessor):
    """Raises ``abort`` for the record ``b"bad"``; records everything else."""

    abort: type[BaseException] = SystemExit

    def process_records(self, data: ProcessRecordsInput) -> None:
        if any(r.data == b"bad" for r in data.records):
            raise self.abort("from user code")
        super().process_records(data)


class AsyncAborting(AsyncRecordingProcessor):
    abort: type[BaseException] = SystemExit

    async def process_records(self, data: ProcessRecordsInput) -> None:
        if any(r.data == b"bad" for r in data.records):
            raise self.abort("from user code")
        await super().process_records(data)


# asyncio.CancelledError from a coroutine was already a failure of the call (CallbackCancelledError).
CASES = [("sync", abort) for abort in ABORTS] + [("async", KeyboardInterrupt), ("async", SystemExit)]


@pytest.mark.parametrize(("kind", "abort"), CASES, ids=[f"{k}-{a.__name__}" for k, a in CASES])
def test_a_record_whose_call_raises_a_base_exception_is_dead_lettered_and_every_shard_goes_on(
    kind: str, abort: type[BaseException]
) -> None:
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    failing, healthy = _two_shards(kinesis)
    kinesis.put("s", failing, b"bad")
    kinesis.put("s", failing, b"after")
    for i in range(3):
        kinesis.put("s", healthy, f"ok{i}".encode())
    base: Any = {"sync": Aborting, "async": AsyncAborting}[kind]
    processor = type("Processor", (base,), {"abort": abort})
    dlq = InMemoryDeadLetterQueue()
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        processor=lambda: processor(journal, "w1"),
        processing=ProcessingConfig(
            max_attempts=2, backoff_base=0.001, backoff_max=0.01, on_failure="dlq", dlq_url="memory://dlq"
        ),
        dlq=dlq,
        threads=ONE_THREAD,
    )
    t = start(worker)
    try:
        wait_until(lambda: len(journal.sequences(healthy)) == 3, what="the healthy shard's records")
        wait_until(lambda: len(journal.sequences(failing)) == 1, what="the record after the failing one")
        kinesis.put("s", healthy, b"later")
        wait_until(lambda: len(journal.sequences(healthy)) == 4, what="a later record of the healthy shard")
    finally:
        worker.request_shutdown()
        t.join(10)
    [letter] = dlq.messages
    assert letter["error_type"] == "CallbackAbortedError"
    assert f"{abort.__name__}('from user code')" in letter["error"]
    stored = tables.checkpoints[("s", failing)].position
    assert stored is not None and stored.sequence == journal.sequences(failing)[-1]


def test_a_halt_on_a_base_exception_is_logged_with_the_original_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    failing, healthy = _two_shards(kinesis)
    kinesis.put("s", failing, b"bad")
    kinesis.put("s", healthy, b"ok")
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        processor=lambda: Aborting(journal, "w1"),
        processing=ProcessingConfig(max_attempts=2, backoff_base=0.001, backoff_max=0.01, on_failure="halt"),
        threads=ONE_THREAD,
    )
    t = start(worker)
    try:
        wait_until(
            lambda: _events(caplog, "shard_halted") != [], what="the shard halted on the failing record"
        )
        wait_until(lambda: journal.sequences(healthy) != [], what="the other shard's record")
    finally:
        worker.request_shutdown()
        t.join(10)
    [halted] = _events(caplog, "shard_halted")
    assert halted.levelno == logging.ERROR and halted.__dict__["shard"] == failing
    assert halted.exc_info is not None
    error = halted.exc_info[1]
    assert isinstance(error, CallbackAbortedError) and isinstance(error.__cause__, SystemExit)
    assert "Aborting.process_records raised SystemExit" in str(error)
    assert len(_events(caplog, "processor_failed")) == 2 + 2  # the batch's attempts, then the record's


class FailsToStartOnce(RecordingProcessor):
    """``initialize`` raises ``SystemExit`` the first time any instance runs it."""

    raised = threading.Event()

    def initialize(self, data: InitializationInput) -> None:
        if not self.raised.is_set():
            self.raised.set()
            raise SystemExit(3)
        super().initialize(data)


def test_initialize_that_raises_system_exit_is_retried_like_any_setup_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    FailsToStartOnce.raised.clear()
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = kinesis.list_shards("s")[0].shard_id
    kinesis.put("s", shard, b"r0")
    worker = make_worker(
        "w1", tables, kinesis, journal, processor=lambda: FailsToStartOnce(journal, "w1"), threads=ONE_THREAD
    )
    t = start(worker)
    try:
        wait_until(lambda: journal.sequences(shard) != [], timeout=15, what="the record, after the retry")
    finally:
        worker.request_shutdown()
        t.join(10)
    [failed] = _events(caplog, "processor_setup_failed")
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], CallbackAbortedError)
    assert isinstance(failed.exc_info[1].__cause__, SystemExit)


class CancelledAtShutdown(RecordingProcessor):
    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        raise asyncio.CancelledError  # e.g. from an asyncio.run() inside it, interrupted


def test_shutdown_requested_that_raises_cancelled_error_still_gets_the_final_checkpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)
    shard = kinesis.list_shards("s")[0].shard_id
    for i in range(3):
        kinesis.put("s", shard, f"r{i}".encode())
    worker = make_worker(
        "w1",
        tables,
        kinesis,
        journal,
        processor=lambda: CancelledAtShutdown(journal, "w1"),
        checkpoint=CheckpointConfig(auto_interval=3600.0),  # only the final checkpoint writes
        threads=ONE_THREAD,
    )
    t = start(worker)
    try:
        wait_until(lambda: len(journal.sequences(shard)) == 3, what="every record delivered")
    finally:
        worker.request_shutdown()
        t.join(10)
    assert not t.is_alive()
    stored = tables.checkpoints[("s", shard)].position
    assert stored is not None and stored.sequence == journal.sequences(shard)[-1]
    [failed] = _events(caplog, "processor_shutdown_failed")
    assert failed.exc_info is not None and failed.exc_info[1] is not None
    assert isinstance(failed.exc_info[1].__cause__, asyncio.CancelledError)


# In a process of its own: on CPython 3.11, a task raising SystemExit or KeyboardInterrupt leaves the next
# ast.parse in the process failing with "AST constructor recursion depth mismatch" (an interpreter bug,
# whatever the loop does next), which would break pytest's own later imports.
_SPAWNED = """
import asyncio, json, logging, sys, threading
from consumer.lifecycle.event_loop import EventLoopThread

failures = []
handler = logging.Handler()
handler.emit = lambda r: failures.append(getattr(r, "error", "")) if getattr(r, "event", "") == "async_task_failed" else None
logging.getLogger("consumer.lifecycle.event_loop").addHandler(handler)
abort = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[sys.argv[1]]
loop = EventLoopThread("test-loop")
ran = threading.Event()

async def exits():
    ran.set()
    raise abort("from a background task")

async def spawn():
    asyncio.get_running_loop().create_task(exits())

loop.run(spawn())
assert ran.wait(5)
try:
    after = loop.run(asyncio.wait_for(asyncio.sleep(0, result=7), 5))
except Exception as exc:
    after = repr(exc)
loop.close()
print(json.dumps({"after": after, "failures": failures}))
"""


@pytest.mark.parametrize("abort", [KeyboardInterrupt, SystemExit])
def test_a_task_a_processor_spawned_that_raises_it_does_not_stop_the_event_loop(
    abort: type[BaseException],
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SPAWNED, abort.__name__],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["after"] == 7, seen  # the loop still runs the shards' coroutines
    assert any(abort.__name__ in error for error in seen["failures"]), seen


@pytest.mark.parametrize("abort", ABORTS)
def test_a_pool_job_that_raises_a_base_exception_leaves_the_thread_to_the_next_job(
    abort: type[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    pool = GrowingPool("test-pool", 1)
    second = threading.Event()

    def fails() -> None:
        raise abort()

    try:
        pool.submit(fails)
        pool.submit(second.set)
        assert second.wait(5), "the job after the failing one ran"
    finally:
        pool.close()
    [failed] = _events(caplog, "pool_job_failed")
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], abort)
    assert pool.threads == 1
