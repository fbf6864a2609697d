"""Callbacks that silently do nothing, hangs outside ``process_records``, and unnamed failure lines.

- A callback written as a generator (``def ...: yield``), an async generator, or an ``async def`` that returns
  an un-awaited coroutine runs none of its body when called. The start-up checks refuse the first two (the
  loader, ``checked_factory``, ``StreamSpec``), naming the class and the callback; at run time the adapter
  takes any such result as the call's failure (``TypeError``), closed first so that Python prints no "never
  awaited" warning: the records are retried, then halted, never checkpointed unprocessed.
- Every processor callback is watched by ``SlowCallWatch``, with its name (``initialize`` through the
  adapter, inside ``start_shard``).
- ``processor_shutdown_failed`` names the stream, shard and epoch, as every shard event does.
"""

from __future__ import annotations

import functools
import gc
import logging
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from consumer.config import ProcessingConfig, StreamSpec, ThreadsConfig
from consumer.errors import ConfigError, ProcessorLoadError
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.async_processor import (
    AsyncBaseProcessor,
    EventLoopThread,
    ProcessorAdapter,
    inert_callback_problem,
    inert_callbacks,
)
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput, ShutdownRequestedInput
from consumer.lifecycle.slow_calls import ProcessorCall, SlowCallWatch, watching_calls
from consumer.loader import checked_factory, load_processor
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, RecordingProcessor, make_worker, start, wait_until

CALLBACKS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")
RAN: list[str] = []  # the bodies that ran (none of a generator's ever does)


class GeneratorRecords(BaseProcessor):
    """``process_records`` with a ``yield``: calling it makes a generator and runs nothing."""

    def process_records(self, data: ProcessRecordsInput) -> Iterator[None]:
        RAN.append("process_records")
        yield None


class AsyncGeneratorInit(AsyncBaseProcessor):
    """``initialize`` with a ``yield`` in an ``async def``."""

    async def initialize(self, data: Any) -> AsyncIterator[None]:  # type: ignore[override]
        RAN.append("initialize")
        yield None

    async def process_records(self, data: ProcessRecordsInput) -> None:
        return None


def _logged(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any) -> Any:
        return function(*args)

    return wrapper


class DecoratedShutdown(BaseProcessor):
    """A generator ``shutdown_requested`` behind a decorator that keeps ``__wrapped__``."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        return None

    @_logged
    def shutdown_requested(self, data: ShutdownRequestedInput) -> Iterator[None]:
        yield None


class _GeneratorCall:
    def __call__(self, data: object) -> Iterator[None]:
        yield None


class CallableLeaseLost(BaseProcessor):
    """``lease_lost`` as an object whose ``__call__`` is a generator function."""

    def __init__(self) -> None:
        self.lease_lost = _GeneratorCall()  # type: ignore[assignment,method-assign]

    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


class Nested(AsyncBaseProcessor):
    """``async def`` that returns another coroutine instead of awaiting it: undetectable before it runs."""

    async def _work(self, data: object) -> None:
        RAN.append("_work")

    async def process_records(self, data: ProcessRecordsInput) -> Any:
        return self._work(data)


def make_generator_records() -> GeneratorRecords:
    """A factory (not a class): what it makes is checked when it runs."""
    return GeneratorRecords()


@pytest.fixture
def loop() -> Iterator[EventLoopThread]:
    event_loop = EventLoopThread("test-loop")
    try:
        yield event_loop
    finally:
        event_loop.close()


@contextmanager
def no_never_awaited_warning() -> Iterator[None]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []


# -- start-up: refused, naming the class and the callback ------------------------------------------------


def test_generator_callbacks_are_found_on_a_class_and_on_an_instance() -> None:
    assert inert_callbacks(GeneratorRecords) == ["process_records"]
    assert inert_callbacks(GeneratorRecords()) == ["process_records"]
    assert inert_callbacks(AsyncGeneratorInit) == ["initialize"]
    assert inert_callbacks(DecoratedShutdown()) == ["shutdown_requested"]
    assert inert_callbacks(CallableLeaseLost()) == ["lease_lost"]
    for fine in (BaseProcessor, BaseProcessor(), AsyncBaseProcessor(), Nested(), RecordingProcessor):
        assert inert_callbacks(fine) == [], fine
    problem = inert_callback_problem(GeneratorRecords())
    assert problem is not None and "\n" not in problem
    assert problem.startswith("GeneratorRecords.process_records is a generator function")


def test_the_loader_refuses_a_generator_callback_before_constructing_anything() -> None:
    path = f"{__name__}:AsyncGeneratorInit"
    with pytest.raises(ProcessorLoadError) as refused:
        load_processor(path)
    message = str(refused.value)
    assert message.startswith(f"processor {path!r}: AsyncGeneratorInit.initialize is a generator function")
    assert "\n" not in message


def test_a_factory_making_a_processor_with_a_generator_callback_is_refused_when_it_runs() -> None:
    path = f"{__name__}:make_generator_records"
    factory = load_processor(path)  # a function: nothing to look at until it runs
    with pytest.raises(ProcessorLoadError, match=r"GeneratorRecords\.process_records is a generator"):
        factory()
    with pytest.raises(ProcessorLoadError, match=r"DecoratedShutdown\.shutdown_requested"):
        checked_factory("app:DecoratedShutdown", DecoratedShutdown)()
    with pytest.raises(ProcessorLoadError, match=r"CallableLeaseLost\.lease_lost"):
        checked_factory("app:CallableLeaseLost", CallableLeaseLost)()
    assert checked_factory("app:Nested", Nested)() is not None  # found only when it runs (below)


def test_a_stream_spec_refuses_a_processor_class_with_a_generator_callback() -> None:
    with pytest.raises(ConfigError) as refused:
        StreamSpec("orders", GeneratorRecords)  # type: ignore[arg-type]
    assert refused.value.field == "StreamSpec.processor_factory (stream 'orders')"
    assert "GeneratorRecords.process_records is a generator function" in str(refused.value)
    StreamSpec("orders", make_generator_records)  # type: ignore[arg-type]  # a factory function: checked when it runs


# -- run time: the call fails, never taken as done ----------------------------------------------------------


@pytest.mark.parametrize("name", CALLBACKS)
def test_a_callback_returning_a_generator_fails_the_call(name: str, loop: EventLoopThread) -> None:
    ran: list[str] = []

    def generator(data: object) -> Iterator[None]:
        ran.append(name)
        yield None

    async def async_generator(data: object) -> AsyncIterator[None]:
        ran.append(name)
        yield None

    for make in (generator, async_generator):
        processor = BaseProcessor()
        setattr(processor, name, make)
        adapter = ProcessorAdapter(processor, loop)
        with pytest.raises(TypeError, match=rf"BaseProcessor\.{name} returned an? (async )?generator"):
            getattr(adapter, name)(None)
    assert ran == []


@pytest.mark.parametrize("name", CALLBACKS)
def test_an_async_callback_returning_a_coroutine_fails_the_call_without_a_warning(
    name: str, loop: EventLoopThread
) -> None:
    ran: list[str] = []

    async def inner() -> None:
        ran.append("inner")

    async def outer(data: object) -> Any:
        return inner()

    processor = AsyncBaseProcessor()
    setattr(processor, name, outer)
    with (
        no_never_awaited_warning(),
        pytest.raises(TypeError, match=rf"AsyncBaseProcessor\.{name} returned a coroutine that never ran"),
    ):
        getattr(ProcessorAdapter(processor, loop), name)(None)
    assert ran == []


def test_the_loader_wrapped_nested_coroutine_fails_too(loop: EventLoopThread) -> None:
    RAN.clear()
    processor = checked_factory("app:Nested", Nested)()
    with no_never_awaited_warning(), pytest.raises(TypeError, match=r"Nested\.process_records returned a"):
        ProcessorAdapter(processor, loop).process_records(None)  # type: ignore[arg-type]
    assert RAN == []


def test_a_sync_callback_that_returns_a_coroutine_still_runs_it(loop: EventLoopThread) -> None:
    ran: list[str] = []

    async def work() -> None:
        ran.append("work")

    processor = BaseProcessor()
    processor.process_records = lambda data: work()  # type: ignore[attr-defined]
    ProcessorAdapter(processor, loop).process_records(None)  # type: ignore[arg-type]
    assert ran == ["work"]


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_a_generator_process_records_in_a_worker_halts_its_shard_with_nothing_checkpointed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: the batch was counted as processed and checkpointed, with not a line logged."""
    caplog.set_level(logging.WARNING)
    RAN.clear()
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
        processor=make_generator_records,  # a factory no start-up check ran (a Worker built directly)
        processing=ProcessingConfig(max_attempts=2, backoff_base=0.001, backoff_max=0.01, on_failure="halt"),
    )
    t = start(worker)
    try:
        wait_until(lambda: bool(_events(caplog, "shard_halted")), what="the shard halted")
    finally:
        worker.request_shutdown()
        t.join(10)
    assert not t.is_alive()
    assert RAN == []
    failures = _events(caplog, "processor_failed")
    assert len(failures) >= 2  # the batch's attempts, then the first record's
    assert all(
        "GeneratorRecords.process_records returned a generator" in f.__dict__["error"] for f in failures
    )
    stored = tables.checkpoints.get(("s", shard))
    assert stored is None or stored.position is None  # nothing taken as done


# -- hangs: every callback watched, with its name ------------------------------------------------------------


def test_a_slow_call_names_its_callback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="consumer.lifecycle.slow_calls")
    call = ProcessorCall("s", "shardId-1", 3, 0.0, threading.get_ident(), "initialize")
    assert SlowCallWatch(1.0).check(5.0, [call]) == {"s": 1}
    [told] = _events(caplog, "processor_call_slow")
    assert told.__dict__["callback"] == "initialize" and told.__dict__["shard"] == "shardId-1"
    assert told.__dict__["hint"].startswith("initialize has not returned")


def test_the_adapter_runs_each_callback_in_its_threads_watch(loop: EventLoopThread) -> None:
    under_way: list[str] = []  # the call the watch has under way
    seen: list[list[str]] = []  # what initialize found under way

    @contextmanager
    def watch(callback: str) -> Iterator[None]:
        under_way.append(callback)
        try:
            yield
        finally:
            under_way.remove(callback)

    class Notes(BaseProcessor):
        def initialize(self, data: Any) -> None:
            seen.append(list(under_way))

        def process_records(self, data: ProcessRecordsInput) -> None:
            return None

    adapter = ProcessorAdapter(Notes(), loop)
    adapter.initialize(None)  # type: ignore[arg-type]  # no watch in place
    with watching_calls(watch):
        adapter.initialize(None)  # type: ignore[arg-type]
    adapter.initialize(None)  # type: ignore[arg-type]  # the watch is gone again
    assert seen == [[], ["initialize"], []] and under_way == []


def test_a_hung_initialize_is_watched_in_a_worker() -> None:
    """The watch a ``ShardWork`` puts in place around ``start_shard``: its ``calling`` names ``initialize``
    while the call runs, and is cleared once it returns."""
    release, entered = threading.Event(), threading.Event()
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 1)

    class Hangs(RecordingProcessor):
        def initialize(self, data: Any) -> None:
            entered.set()
            release.wait(10)
            super().initialize(data)

    worker = make_worker(
        "w1", tables, kinesis, journal, processor=lambda: Hangs(journal, "w1"), threads=ThreadsConfig()
    )

    def calls() -> list[ProcessorCall]:
        return [c.work.calling for c in list(worker.consumers.values()) if c.work.calling is not None]

    t = start(worker)
    try:
        assert entered.wait(10)
        wait_until(lambda: bool(calls()), what="the call noted")
        [call] = calls()
        assert call.callback == "initialize" and call.stream == "s"
        release.set()
        wait_until(lambda: any(e[2].startswith("init:") for e in journal.events), what="initialize returned")
        wait_until(lambda: not calls(), what="the call forgotten")
    finally:
        release.set()
        worker.request_shutdown()
        t.join(10)
    assert not t.is_alive()


# -- failure lines name their shard ---------------------------------------------------------------------------


class FailsAtShutdown(RecordingProcessor):
    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        raise RuntimeError("cannot flush")


def test_a_failed_shutdown_requested_is_logged_with_the_stream_shard_and_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    tables, kinesis, journal = InMemoryTables(), InMemoryKinesis(), Journal()
    kinesis.create_stream("s", 2)
    shards = sorted(s.shard_id for s in kinesis.list_shards("s"))
    for shard in shards:
        kinesis.put("s", shard, b"r")
    worker = make_worker("w1", tables, kinesis, journal, processor=lambda: FailsAtShutdown(journal, "w1"))
    t = start(worker)
    try:
        wait_until(lambda: len(journal.sequences()) == 2, what="both shards' records")
    finally:
        worker.request_shutdown()
        t.join(10)
    failed = _events(caplog, "processor_shutdown_failed")
    assert sorted(r.__dict__["shard"] for r in failed) == shards
    for record in failed:
        assert record.__dict__["stream"] == "s" and record.__dict__["epoch"] >= 1
        assert record.exc_info is not None and "cannot flush" in str(record.exc_info[1])


def test_the_start_up_checks_refuse_a_typed_configs_factory_function_whose_processor_yields() -> None:
    """A factory function is not a class, so ``StreamSpec`` cannot look at its callbacks; the start-up checks
    make the processor once and refuse it, naming the stream and the callback (before, it ran, and every
    call failed at run time only)."""
    from consumer import WorkerConfig
    from consumer.preflight import _construct

    class Yields(BaseProcessor):
        def process_records(self, data):  # type: ignore[no-untyped-def]
            yield from data.records

    def make() -> Yields:
        return Yields()

    config = WorkerConfig(
        application="orders",
        lease_table="orders-leases",
        checkpoint_table="orders-checkpoints",
        streams=(StreamSpec("orders", make),),
    )
    with pytest.raises(ProcessorLoadError, match=r"stream 'orders'.*Yields\.process_records is a generator"):
        _construct(config, {})
