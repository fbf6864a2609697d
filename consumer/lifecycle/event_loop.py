"""The worker's asyncio event loop: one loop on a thread of its own, shared by the shards whose processor has
``async def`` callbacks. A shard's thread hands a coroutine to it and waits (``EventLoopThread.run``); a
watchdog logs ``async_loop_blocked`` with the stack when a coroutine blocks the loop; the coroutines'
checkpoint writes run on the loop's own write threads (``offload``); at stop, cancelled coroutines get time
to run their cleanup."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from consumer.lifecycle.pools import GrowingPool
from consumer.lifecycle.processor import CallbackAbortedError
from consumer.logs import log_event

__all__ = ["CallbackCancelledError", "EventLoopThread", "aborted"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class CallbackCancelledError(CallbackAbortedError):
    """An async callback ended with ``asyncio.CancelledError`` that the worker did not ask for: a failure of
    the call like any other (retried, then dead-lettered or the shard halted), not a stop of the worker."""


def aborted(what: str, exc: BaseException) -> CallbackAbortedError:
    """``exc``, a ``BaseException`` that is not an ``Exception`` raised by the processor's ``what``, as the
    call's failure (raise it ``from exc``)."""
    return CallbackAbortedError(
        f"{what} raised {exc!r}: a failure of the call like any other (retried, "
        "then dead-lettered or the shard halted), not a stop of the worker; to stop it, use SIGTERM or "
        "worker.request_shutdown()"
    )


class EventLoopThread:
    """One asyncio event loop on a daemon thread of its own, started on first use and shared by a worker's
    shards. ``run(coro)`` blocks the calling thread (a shard's) until the coroutine finishes; ``offload``
    runs the coroutines' checkpoint writes on threads of its own (``write_threads`` at most, started as
    needed), never on the loop's default executor, which the application's own work may fill."""

    def __init__(self, name: str, *, blocked_warning: float = 1.0, write_threads: int = 64) -> None:
        self._name = name
        self._blocked_warning = blocked_warning
        # grow_after=0: a write never waits while a thread may start; idle ones beyond the first end
        self._writes = GrowingPool(f"{name}-writes", write_threads, core=1, grow_after=0.0)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.blocked_episodes = 0  # times the watchdog saw the loop held past ``blocked_warning``

    @property
    def started(self) -> bool:
        """Whether the loop's thread was ever started (it is only when an async processor runs)."""
        return self._thread is not None

    def run(self, coro: Awaitable[_T]) -> _T:
        """Run ``coro`` on the loop and return its result (or raise its exception) in the calling thread."""
        try:
            loop = self._ensure_started()
        except RuntimeError:
            if inspect.iscoroutine(coro):
                coro.close()  # never to run: close it rather than leave it un-awaited
            raise
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(coro), loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._closed.is_set():
                raise RuntimeError(
                    f"{self._name}: the worker stopped and cancelled this callback (still running when "
                    "the worker's event loop closed)"
                ) from None
            raise CallbackCancelledError(
                f"{self._name}: the callback's coroutine ended with asyncio.CancelledError that the worker "
                "did not ask for (raised inside it, or a task it awaited was cancelled); raise an ordinary "
                "exception to have the call retried"
            ) from None

    async def offload(self, call: Callable[[], _T]) -> _T:
        """Await ``call`` (blocking: a checkpoint write) run on this loop's own write threads, from any
        running loop. Never the loop's default executor: the application's ``asyncio.to_thread`` and
        ``run_in_executor(None, ...)`` work may fill it, and a checkpoint must not queue behind that."""
        if self._closed.is_set():
            raise RuntimeError(f"{self._name}: the event loop is closed")
        done: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def job() -> None:
            if not done.set_running_or_notify_cancel():
                return  # the awaiting coroutine was cancelled before the write started
            try:
                done.set_result(call())
            except BaseException as exc:  # handed to the awaiting coroutine, raised there
                done.set_exception(exc)

        self._writes.submit(job)
        return await asyncio.wrap_future(done)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what still runs, give the cancelled coroutines up to ``timeout`` to finish (their
        ``finally`` blocks and ``async with`` exits run, as under ``asyncio.run``), stop the loop and wait
        for its thread within the same ``timeout``."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._closed.set()
        if loop is None or thread is None:
            self._writes.close()
            return
        deadline = time.monotonic() + timeout
        try:
            # The tasks get most of ``timeout``; the rest is for the report and the loop's own stop.
            ended = asyncio.run_coroutine_threadsafe(_cancel_all(self._name, 0.8 * timeout), loop)
        except RuntimeError:  # the loop is already closed
            self._writes.close()
            return
        with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            ended.result(timeout)  # on a timeout, _cancel_all says which tasks did not end
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        thread.join(max(0.0, deadline - time.monotonic()))
        self._writes.close()  # after the tasks: a cancelled one's final acheckpoint could still use it

    def _ensure_started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed.is_set():
                raise RuntimeError(f"{self._name}: the event loop is closed")
            if self._loop is None:
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._main, args=(ready,), name=self._name, daemon=True
                )
                self._thread.start()
                ready.wait()
            assert self._loop is not None
            return self._loop

    def _main(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(_report_loop_error)
        self._loop = loop
        ready.set()
        watchdog = threading.Thread(
            target=self._watch, args=(loop,), name=f"{self._name}-watchdog", daemon=True
        )
        watchdog.start()
        log_event(logger, "async_loop_started", loop=self._name)
        try:
            while True:
                try:
                    loop.run_forever()
                    break
                except (KeyboardInterrupt, SystemExit) as exc:
                    # asyncio lets these out of run_forever when a task raises them (a task the processor
                    # spawned: its callbacks' own are translated by _as_coroutine): one task's failure,
                    # not the end of the loop every async shard of the worker runs on
                    what = "a task raised it; the loop goes on"
                    _report_loop_error(loop, {"message": what, "exception": exc})
                    if self._closed.is_set():
                        break
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            log_event(logger, "async_loop_stopped", loop=self._name)

    def _watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Ping the loop; when a ping waits past ``blocked_warning``, a callback is blocking it: say where."""
        while not self._closed.is_set() and not loop.is_closed():
            answered = threading.Event()
            try:
                loop.call_soon_threadsafe(answered.set)
            except RuntimeError:  # closed meanwhile
                return
            if answered.wait(self._blocked_warning) or self._closed.is_set():
                self._closed.wait(self._blocked_warning)
                continue
            self.blocked_episodes += 1
            log_event(
                logger,
                "async_loop_blocked",
                logging.WARNING,
                loop=self._name,
                blocked_for_s=self._blocked_warning,
                hint="a coroutine called something that blocks; await it, or run it with asyncio.to_thread",
                stack=self._loop_stack(),
            )
            while not answered.wait(self._blocked_warning) and not self._closed.is_set():
                pass  # one line per episode: wait until the loop answers again

    def _loop_stack(self) -> str:
        thread = self._thread
        frame = sys._current_frames().get(thread.ident) if thread is not None and thread.ident else None
        return "".join(traceback.format_stack(frame)[-6:]) if frame is not None else ""


async def _as_coroutine(awaitable: Awaitable[_T]) -> _T:
    """Await ``awaitable``; ``KeyboardInterrupt`` or ``SystemExit`` from it is its failure
    (``CallbackAbortedError``): asyncio would otherwise let it out of the loop and stop the loop itself."""
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as exc:
        name = getattr(awaitable, "__qualname__", type(awaitable).__name__)
        raise aborted(f"the coroutine {name}", exc) from exc


async def _cancel_all(name: str, timeout: float) -> None:
    """Cancel every other task on the loop and wait up to ``timeout`` for them to end; a task that raised
    something other than its cancellation is reported (nobody else will retrieve its exception)."""
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in tasks:
        if task.done() and not task.cancelled() and (exc := task.exception()) is not None:
            _report_loop_error(
                asyncio.get_running_loop(),
                {"message": "a task failed while the worker stopped", "exception": exc, "task": task},
            )
    if pending:
        log_event(
            logger,
            "async_tasks_abandoned",
            logging.WARNING,
            loop=name,
            tasks=sorted(t.get_name() + ":" + _coroutine_name(t) for t in pending),
            timeout_s=timeout,
            hint="these coroutines did not end within the timeout after being cancelled (CancelledError "
            "swallowed, or a finally block that awaits for long)",
        )


def _coroutine_name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    return str(getattr(coro, "__qualname__", type(coro).__name__))


def _report_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler, one structured line instead of asyncio's multi-line text:
    ``async_task_failed`` for a task that raised and that nobody awaited (asyncio's "Task exception was
    never retrieved"), ``async_loop_error`` for anything else the loop reports (e.g. a task destroyed
    while still pending)."""
    exc = context.get("exception")
    task = context.get("task") or context.get("future")
    fields: dict[str, Any] = {"what": str(context.get("message", ""))}
    if isinstance(task, asyncio.Task):
        fields["task"] = task.get_name() + ":" + _coroutine_name(task)
    if isinstance(exc, BaseException):
        fields["error"] = repr(exc)
        fields["exc"] = "".join(traceback.format_exception(exc))
        hint = "await the tasks you create (or add a done callback that handles their exceptions)"
        log_event(logger, "async_task_failed", logging.ERROR, **fields, hint=hint)
    else:
        log_event(logger, "async_loop_error", logging.ERROR, **fields)
