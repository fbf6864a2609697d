"""Asyncio callbacks that go wrong: a coroutine that cancels itself, tasks a processor spawned that fail or
are still running when the worker stops, and an ``async def`` behind a plain decorator."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.async_processor import EventLoopThread, is_async_processor
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until

LOGGER = "consumer.lifecycle.event_loop"
SHARD = "shardId-000000000000"


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_a_coroutine_that_raises_cancelled_error_itself_is_not_reported_as_a_stopped_loop() -> None:
    loop = EventLoopThread("test-loop")

    async def cancels() -> None:
        raise asyncio.CancelledError  # e.g. a cancelled inner task's error let through

    try:
        with pytest.raises(Exception, match="CancelledError that the worker did not ask for") as caught:
            loop.run(cancels())
        assert "stopped" not in str(caught.value)  # the loop runs on; the call failed like any other
        assert loop.run(asyncio.sleep(0, result=7)) == 7
    finally:
        loop.close()


def test_closing_the_loop_lets_cancelled_tasks_run_their_cleanup(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    loop = EventLoopThread("test-loop")
    cleaned = threading.Event()
    started = threading.Event()

    async def session() -> None:  # e.g. a processor's background flusher holding a client session
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)  # e.g. ``await session.close()``
            cleaned.set()

    async def spawn() -> None:
        asyncio.get_running_loop().create_task(session())

    loop.run(spawn())
    assert started.wait(5)
    loop.close(timeout=5)
    assert cleaned.is_set(), "the cancelled task's finally block ran to its end"
    gc.collect()
    destroyed = [r for r in caplog.records if "destroyed but it is pending" in r.getMessage()]
    assert destroyed == []


def test_a_task_that_does_not_end_when_cancelled_is_named_at_close(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    loop = EventLoopThread("test-loop")
    release = threading.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue  # swallows its cancellation

    async def spawn() -> None:
        asyncio.get_running_loop().create_task(stubborn(), name="flusher")

    loop.run(spawn())
    try:
        loop.close(timeout=0.3)
    finally:
        release.set()
    [abandoned] = _events(caplog, "async_tasks_abandoned")
    assert abandoned.__dict__["tasks"] == [f"flusher:{stubborn.__qualname__}"]


def test_a_failed_task_a_processor_spawned_is_one_structured_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    loop = EventLoopThread("test-loop")

    async def post_one() -> None:
        raise ConnectionError("endpoint down")

    async def fire_and_forget() -> None:
        asyncio.get_running_loop().create_task(post_one())  # never awaited
        await asyncio.sleep(0.01)

    try:
        loop.run(fire_and_forget())
        gc.collect()
        wait_until(
            lambda: any("post_one" in r.__dict__["task"] for r in _events(caplog, "async_task_failed")),
            what="the task's failure reported",
        )
    finally:
        loop.close()
    [failed] = [r for r in _events(caplog, "async_task_failed") if "post_one" in r.__dict__["task"]]
    assert failed.levelno == logging.ERROR
    assert failed.__dict__["error"] == "ConnectionError('endpoint down')"
    unretrieved = [r for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.WARNING]
    assert unretrieved == []  # not also asyncio's own multi-line "Task exception was never retrieved"


def traced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A plain (synchronous) decorator, as tracing and metrics libraries write them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


class Traced(BaseProcessor):
    def __init__(self, seen: list[bytes]) -> None:
        self.seen = seen

    @traced
    async def process_records(self, data: ProcessRecordsInput) -> None:
        await asyncio.sleep(0)
        self.seen.extend(r.data for r in data.records)


class AsyncCallable:
    async def __call__(self, data: object) -> None:
        return None


class CallableCallback(BaseProcessor):
    process_records: Any = AsyncCallable()  # an object with ``async def __call__``


def test_an_async_callback_behind_a_plain_decorator_is_run_not_dropped() -> None:
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("s", 1)
    put = [f"r{i}".encode() for i in range(5)]
    for data in put:
        kinesis.put("s", SHARD, data)
    seen: list[bytes] = []
    worker = make_worker("w1", tables, kinesis, Journal(), processor=lambda: Traced(seen))
    t = start(worker)
    try:
        wait_until(lambda: seen == put, what="every record processed by the decorated coroutine")
    finally:
        worker.request_shutdown()
        t.join(10)
    assert tables.checkpoints[("s", SHARD)].position is not None


def test_async_callbacks_are_recognised_through_wrappers_and_callable_objects() -> None:
    assert is_async_processor(Traced([]))
    assert is_async_processor(CallableCallback())
    assert not is_async_processor(BaseProcessor())
