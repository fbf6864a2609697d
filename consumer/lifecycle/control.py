"""Running something in the background of your process: ``start()``, ``stop(timeout)``, ``join()``, a
``with`` block, and signal handlers installed only when asked (the embedding half of ``Worker``)."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType, TracebackType
from typing import Any, Self

from consumer.errors import WorkerStateError
from consumer.logs import log_event

__all__ = ["BackgroundControl"]

logger = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class BackgroundControl:
    """``start`` / ``stop`` / ``join`` / ``with`` around a subclass's ``run()`` and ``request_shutdown()``.

    A worker runs once: by ``start()`` or by ``run()``, whichever comes first; the subclass's ``run()`` calls
    ``_claim_run()`` first, which refuses a second run of either kind."""

    id: str

    def _init_control(self) -> None:
        self._control = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._saved_handlers: dict[int, Any] = {}
        self._finished = threading.Event()  # set when the thread started by start() is done
        self._ran_by: str | None = None  # "start()" or "run()": what ran the worker (it runs once)
        self._thread_ran = False  # the thread of start() has entered run()

    def run(self, *, handle_signals: bool = False) -> None:
        """Run in the calling thread until stopped (the subclass's)."""
        raise NotImplementedError

    def request_shutdown(self) -> None:
        """Begin stopping; safe from a signal handler (the subclass's)."""
        raise NotImplementedError

    def start(self, *, handle_signals: bool = False) -> None:
        """Run the worker on a thread of its own and return at once (``join()`` waits for it to end).

        With ``handle_signals`` (from the main thread only) SIGTERM and SIGINT start the graceful shutdown;
        the previous handlers come back when ``join()`` or ``stop()`` sees the worker stopped. A call out of
        order (a second start, ``handle_signals`` off the main thread) raises ``WorkerStateError`` and leaves
        the worker as it was."""
        if handle_signals:
            _need_main_thread()
        with self._control:
            self._refuse_second_run()
            self._ran_by = "start()"
            self._thread = threading.Thread(target=self._run_capturing, name=f"worker-{self.id}", daemon=True)
        if handle_signals:
            self._install_signal_handlers()
        self._thread.start()

    def _claim_run(self, *, handle_signals: bool = False) -> None:
        """Called first by the subclass's ``run()``: the thread of ``start()`` goes on; a direct call after
        ``start()`` or after an earlier ``run()`` (running or ended), or with ``handle_signals`` off the main
        thread, raises ``WorkerStateError`` and changes nothing (a second run would register the worker
        again, and leave its item behind in the lease table)."""
        if handle_signals:
            _need_main_thread()
        with self._control:
            if (
                self._ran_by == "start()"
                and not self._thread_ran
                and threading.current_thread() is self._thread
            ):
                self._thread_ran = True
                return
            self._refuse_second_run()
            self._ran_by = "run()"

    def _refuse_second_run(self) -> None:
        """``WorkerStateError`` when the worker was already started or run (under ``_control``)."""
        if self._ran_by == "start()":
            raise WorkerStateError(f"worker {self.id} was already started; create a new one to run again")
        if self._ran_by == "run()":
            raise WorkerStateError(
                f"worker {self.id} was already run with run(); create a new one to run again"
            )

    def stop(self, timeout: float | None = None) -> bool:
        """Begin the graceful shutdown (hand-offs, final checkpoints, deregistration) and wait up to
        ``timeout`` seconds (None: until it ends). True when the worker has stopped; re-raises the error
        that ended it, if any. Before ``start()`` it raises ``WorkerStateError`` and changes nothing (a worker
        running in ``run()`` is stopped with ``request_shutdown()``)."""
        if self._thread is None:
            raise WorkerStateError(
                f"worker {self.id} was not started with start(); a worker running in run() stops with "
                "request_shutdown()"
            )
        self.request_shutdown()
        return self.join(timeout)

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: until it ends) for a started worker to stop. True when it
        has stopped; re-raises the error that ended it, if any. Ctrl-C interrupts the wait."""
        thread = self._thread
        if thread is None:
            raise WorkerStateError(f"worker {self.id} was not started; call start() first")
        # Waiting on an event, not in Thread.join: a Ctrl-C that interrupts Thread.join can leave the thread
        # looking finished while it still runs, and the process would exit in the middle of the shutdown.
        if not self._finished.wait(timeout):
            return False
        thread.join()  # past run()'s last statement: returns at once
        self._restore_signal_handlers()
        if self._error is not None:
            raise self._error
        return True

    @property
    def running(self) -> bool:
        """True from ``start()`` until the worker has stopped."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _run_capturing(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # the worker's own thread: keep the error for join() to raise
            self._error = exc
            log_event(
                logger, "worker_failed", logging.ERROR, worker=self.id, error=f"{type(exc).__name__}: {exc}"
            )
        finally:
            self._finished.set()

    def _install_signal_handlers(self) -> None:
        _need_main_thread()

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            log_event(logger, "signal_received", signal=signal.Signals(signum).name)
            self.request_shutdown()

        for sig in _SIGNALS:
            self._saved_handlers[sig] = signal.signal(sig, on_signal)

    def _restore_signal_handlers(self) -> None:
        if not self._saved_handlers or threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in self._saved_handlers.items():
            signal.signal(sig, handler)
        self._saved_handlers.clear()


def _need_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        raise WorkerStateError("handle_signals=True needs the main thread (Python delivers signals there)")
