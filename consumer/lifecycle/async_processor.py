"""Asyncio processors: callbacks written with ``async def`` run on one event loop per worker.

Each shard keeps its own thread and its own order: the shard's thread hands a callback's coroutine to the
worker's loop and waits for it, exactly as it waits for a synchronous callback, so ordering, retries,
``done()``, fencing and checkpoints are the same code for both kinds. Coroutines of different shards run
concurrently on the one loop: one that awaits slow I/O holds up only its own shard. One that blocks the loop
(a synchronous call inside a coroutine) stalls the other async shards, never the coordinator (heartbeats,
hand-offs run on threads of their own); a watchdog logs ``async_loop_blocked`` with the blocking stack.

A callback written as a generator (a ``yield`` in a ``def`` or an ``async def``) runs none of its body when
called: the start-up checks refuse it (``inert_callbacks``), and a call that still gives back a generator,
an async generator or a coroutine (``async def`` that returns another coroutine without awaiting it) fails
(``TypeError``), as any failure of the call: never taken as done.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from consumer.lifecycle.event_loop import CallbackCancelledError, EventLoopThread, aborted
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.lifecycle.slow_calls import watched

__all__ = [
    "AsyncBaseProcessor",
    "AsyncProcessorAdapter",
    "AsyncRecordProcessor",
    "CallbackCancelledError",
    "EventLoopThread",
    "ProcessorAdapter",
    "adapt",
    "inert_callback_problem",
    "inert_callbacks",
    "is_async_processor",
    "returns_coroutine",
    "unrun_work",
]


CALLBACKS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")


@runtime_checkable
class AsyncRecordProcessor(Protocol):
    """A record processor whose callbacks are coroutines; same meaning and inputs as ``RecordProcessor``.

    Checkpoint from a coroutine with ``await data.checkpointer.acheckpoint()``: the write runs on a thread,
    so the loop (and the other shards' coroutines) go on meanwhile.

    A coroutine is never cancelled when the lease is lost: it runs to its end (``data.guard`` then says the
    lease is gone, checkpoints raise ``LeaseLostError``, ``done()`` is ignored, and the shard's new owner may
    already have started), and ``lease_lost`` follows. When the worker stops, a callback still running after
    ``shutdown.deadline`` and then ``shutdown.final_checkpoint_timeout`` is cancelled (``CancelledError``), as
    are the tasks the processor started; they get up to another ``final_checkpoint_timeout`` to run their
    ``finally`` blocks. A task that fails unawaited is logged as ``async_task_failed``."""

    async def initialize(self, data: InitializationInput) -> None:
        """The shard's ownership begins (before its first batch)."""
        ...

    async def process_records(self, data: ProcessRecordsInput) -> None:
        """Process one batch; raise to have it retried (then dead-lettered or the shard halted)."""
        ...

    async def lease_lost(self, data: LeaseLostInput) -> None:
        """The lease moved on without a hand-off: stop side effects; nothing can be checkpointed."""
        ...

    async def shard_ended(self, data: ShardEndedInput) -> None:
        """The shard is closed and fully read: checkpoint its end so that its children can start."""
        ...

    async def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        """The worker stops or hands the shard over: flush and checkpoint now."""
        ...


class AsyncBaseProcessor:
    """Convenience base for asyncio processors: no-op callbacks, and the shard end and a requested shutdown
    checkpointed as the protocol requires. Subclasses define ``async def process_records``."""

    async def initialize(self, data: InitializationInput) -> None:
        """Nothing to prepare by default."""
        return None

    async def lease_lost(self, data: LeaseLostInput) -> None:
        """Nothing to undo by default (the lease is gone; nothing can be checkpointed)."""
        return None

    async def shard_ended(self, data: ShardEndedInput) -> None:
        """Checkpoint the shard's end, so that its children can start."""
        await data.checkpointer.acheckpoint()

    async def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        """Checkpoint what is done before the lease is handed over or released."""
        await data.checkpointer.acheckpoint()


def is_async_processor(processor: object) -> bool:
    """True when any of the processor's lifecycle callbacks is a coroutine function, also behind a
    decorator that keeps ``__wrapped__`` (``functools.wraps``) or as an object with ``async def __call__``:
    such a callback returns a coroutine that must be run, not dropped."""
    return any(returns_coroutine(getattr(processor, name, None)) for name in CALLBACKS)


def returns_coroutine(callback: object) -> bool:
    """Whether calling ``callback`` gives a coroutine to run: a coroutine function, one behind decorators
    that set ``__wrapped__``, or an object whose ``__call__`` is ``async def``."""
    if callback is None:
        return False
    if inspect.iscoroutinefunction(callback):
        return True
    try:
        unwrapped = inspect.unwrap(callback)  # type: ignore[arg-type]
    except ValueError:  # a __wrapped__ cycle
        return False
    if inspect.iscoroutinefunction(unwrapped):
        return True
    call = inspect.getattr_static(type(callback), "__call__", None)
    return not inspect.isroutine(callback) and inspect.iscoroutinefunction(call)


def inert_callbacks(processor: object) -> list[str]:
    """The lifecycle callbacks of ``processor`` (an instance or its class) written as generator or async
    generator functions (a ``yield`` in the body), also behind decorators that keep ``__wrapped__`` or as an
    object whose ``__call__`` is one: calling such a callback runs none of its body, so its records would be
    checkpointed unprocessed."""
    return [name for name in CALLBACKS if _is_generator_callback(getattr(processor, name, None))]


def inert_callback_problem(processor: object) -> str | None:
    """One line naming the class and its callbacks that ``inert_callbacks`` finds (None without any): what
    the start-up checks refuse."""
    names = inert_callbacks(processor)
    if not names:
        return None
    cls = processor if isinstance(processor, type) else type(processor)
    which = ", ".join(f"{cls.__name__}.{name}" for name in names)
    kind = "is a generator function" if len(names) == 1 else "are generator functions"
    return (
        f"{which} {kind} (a yield in the body): a call runs none of the body, and the worker would take it as "
        "done (its records checkpointed unprocessed); write it without yield (def or async def)"
    )


def _is_generator_callback(callback: object) -> bool:
    if callback is None:
        return False
    kinds = (inspect.isgeneratorfunction, inspect.isasyncgenfunction)
    try:
        unwrapped = inspect.unwrap(callback)  # type: ignore[arg-type]
    except ValueError:  # a __wrapped__ cycle
        unwrapped = callback
    if any(kind(callback) or kind(unwrapped) for kind in kinds):
        return True
    if inspect.isroutine(callback) or isinstance(callback, type):
        return False
    call = inspect.getattr_static(type(callback), "__call__", None)
    return any(kind(call) for kind in kinds)


def unrun_work(result: object) -> bool:
    """Whether a callback's (awaited) result is work that never ran: a coroutine, a generator or an async
    generator. The adapter fails such a call (``_refuse_inert``)."""
    return inspect.iscoroutine(result) or inspect.isgenerator(result) or inspect.isasyncgen(result)


def _refuse_inert(what: str, result: object) -> None:
    """Raise ``TypeError`` if ``result``, what ``what`` returned (awaited, for a coroutine), is work that never
    ran: a generator, an async generator or a coroutine. It is closed first (no "never awaited" warning)."""
    if inspect.iscoroutine(result):
        result.close()
        kind, cause = "a coroutine", "an async def that returns another coroutine instead of awaiting it"
    elif inspect.isgenerator(result):
        result.close()
        kind, cause = "a generator", "a yield in its body"
    elif inspect.isasyncgen(result):  # never started: nothing to finalize
        kind, cause = "an async generator", "a yield in its async def"
    else:
        return
    raise TypeError(
        f"{what} returned {kind} that never ran ({cause}): the call did no work, so it fails as any "
        "failure of the call does, rather than be taken as done"
    )


class ProcessorAdapter:
    """The ``RecordProcessor`` the worker calls, in front of the user's (sync or async): each callback that
    returns an awaitable is run on the worker's ``EventLoopThread`` while the shard's thread waits for it;
    plain callbacks run as they are. Whatever a callback raises reaches the worker as an ``Exception``: a
    ``BaseException`` that is not one (``asyncio.CancelledError``, ``KeyboardInterrupt``, ``SystemExit``)
    becomes ``CallbackAbortedError``, the call's failure like any other; so does a call whose (awaited) result
    is a generator, an async generator or a coroutine, whose body never ran (``TypeError``). Each call runs in
    the watch its thread has in place (``slow_calls.watched``). Other attributes (``checkpoint_mode``,
    ``required_resources`` ...) are the wrapped processor's."""

    def __init__(self, processor: object, loop: EventLoopThread) -> None:
        self.processor = processor
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        return getattr(self.processor, name)

    def _call(self, name: str, data: object) -> None:
        what = f"{type(self.processor).__name__}.{name}"
        try:
            with watched(name):
                result = getattr(self.processor, name)(data)
                if inspect.isawaitable(result):
                    result = self._loop.run(result)
            _refuse_inert(what, result)
        except Exception:
            raise
        except BaseException as exc:  # user code on a worker thread: its failure, never the thread's end
            raise aborted(what, exc) from exc

    def initialize(self, data: InitializationInput) -> None:
        self._call("initialize", data)

    def process_records(self, data: ProcessRecordsInput) -> None:
        self._call("process_records", data)

    def lease_lost(self, data: LeaseLostInput) -> None:
        self._call("lease_lost", data)

    def shard_ended(self, data: ShardEndedInput) -> None:
        self._call("shard_ended", data)

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        self._call("shutdown_requested", data)


#: The adapter's earlier name (it adapted async processors only).
AsyncProcessorAdapter = ProcessorAdapter


def adapt(processor: RecordProcessor | AsyncRecordProcessor, loop: EventLoopThread) -> RecordProcessor:
    """``processor`` behind a ``ProcessorAdapter`` on ``loop`` (whose thread starts only if a callback is
    async)."""
    return ProcessorAdapter(processor, loop)
