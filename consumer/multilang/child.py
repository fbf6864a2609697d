"""One MultiLang child process: started, written to, read from with a bound, and ended.

Its stdout carries the protocol only (read a line at a time on a thread of its own, so that a wait has a
bound); its stderr is the application's log, logged as ``child_stderr`` events as it comes and kept as a
tail for the failure report. The child runs in a session of its own: a Ctrl-C meant for the daemon
reaches the daemon, which then shuts each child down in the protocol's order.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import queue
import select
import shutil
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from consumer.logs import log_event
from consumer.multilang.protocol import CheckpointRequest, ProtocolError, StatusReply, parse_child_line

__all__ = ["Child", "ChildFailed", "resolve_command"]

logger = logging.getLogger(__name__)

_TAIL_BYTES = 4096


class ChildFailed(Exception):
    """The child exited, did not answer in time, or wrote something that is not the protocol."""


class _Tail:
    """The last ``_TAIL_BYTES`` of a stream, for the failure report."""

    def __init__(self) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._lock = threading.Lock()

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self._chunks.append(chunk)
            self._size += len(chunk)
            while self._size - len(self._chunks[0]) >= _TAIL_BYTES:
                self._size -= len(self._chunks.popleft())

    def text(self) -> str:
        with self._lock:
            data = b"".join(self._chunks)
        return data[-_TAIL_BYTES:].decode("utf-8", "replace")


def _read_stdout(pipe: IO[bytes], lines: queue.Queue[bytes | None]) -> None:
    for line in iter(pipe.readline, b""):
        lines.put(line)
    lines.put(None)


_MAX_LINE = 65536  # a longer stderr line is logged in pieces of this size
_QUIET = 0.2  # seconds without more stderr after which a line without its newline yet is logged as it is


def _read_stderr(pipe: IO[bytes], tail: _Tail, shard: str, pid: int) -> None:
    """One ``child_stderr`` event per line the child writes (``text`` keeps its newline), however the pipe
    cuts it up, as the KCL's daemon logs its children's stderr; text without a newline (amazon-kclpy's sample
    writes its lines so) is logged once the child has written nothing more for ``_QUIET`` seconds."""
    fd = pipe.fileno()
    pending = b""

    def emit(data: bytes) -> None:
        log_event(logger, "child_stderr", shard=shard, pid=pid, text=data.decode("utf-8", "replace"))

    while True:
        if pending and not select.select([fd], [], [], _QUIET)[0]:
            emit(pending)  # quiet: the child wrote this much and no newline yet
            pending = b""
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        tail.add(chunk)
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if not cut and len(pending) >= _MAX_LINE:
            cut = len(pending)
        for line in pending[:cut].splitlines(keepends=True):
            emit(line)
        pending = pending[cut:]
    if pending:  # the last text, without a newline, at exit
        emit(pending)


def _abandon(proc: subprocess.Popen[bytes]) -> None:
    """End of input for a child nobody talks to any more; killed if it is still there a few seconds later."""
    if proc.poll() is not None:
        return
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    timer = threading.Timer(5.0, _kill_if_running, (proc,))
    timer.daemon = True
    timer.start()


def _kill_if_running(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()


def resolve_command(command: Sequence[str], workdir: Path, path: str | None) -> list[str]:
    """``command`` with its program as it will be started: a bare name is a file beside the properties (the
    KCL's samples name a script there) or else a program on ``path`` (``PATH``); a relative path is taken from
    ``workdir``. ``ValueError`` says what is missing or not executable, so that a typo fails at start-up rather
    than once per shard."""
    argv = list(command)
    if not argv:
        raise ValueError("is empty")
    program = argv[0]
    if "/" not in program:
        local = workdir / program
        if local.is_file():
            argv[0] = str(local)
        elif shutil.which(program, path=path) is not None:
            return argv
        else:
            raise ValueError(f"{program!r} is neither a file in {workdir} nor a program on PATH")
    target = Path(argv[0]) if Path(argv[0]).is_absolute() else workdir / argv[0]
    if not target.is_file():
        raise ValueError(f"{program!r}: no such file ({target})")
    if not os.access(target, os.X_OK):
        raise ValueError(
            f"{program!r} is not executable ({target}): chmod +x it, or start it with its interpreter"
        )
    return argv


class Child:
    """A started child process for one shard."""

    def __init__(
        self, command: Sequence[str], workdir: Path, shard: str, env: Mapping[str, str] | None = None
    ) -> None:
        try:
            argv = resolve_command(command, workdir, (env if env is not None else os.environ).get("PATH"))
        except ValueError as exc:
            raise ChildFailed(str(exc)) from None
        self.shard = shard
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=workdir,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        except OSError as exc:
            raise ChildFailed(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        self.pid = self._proc.pid
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._tail = _Tail()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        # The readers hold the pipes, never this object: a Child dropped without a goodbye (a shard that
        # gave up) is collected, and its finalizer ends the process.
        self._readers = [
            threading.Thread(
                target=_read_stdout,
                args=(self._proc.stdout, self._lines),
                name=f"child-out-{shard}",
                daemon=True,
            ),
            threading.Thread(
                target=_read_stderr,
                args=(self._proc.stderr, self._tail, shard, self.pid),
                name=f"child-err-{shard}",
                daemon=True,
            ),
        ]
        for t in self._readers:
            t.start()
        weakref.finalize(self, _abandon, self._proc)
        log_event(logger, "child_started", shard=shard, pid=self.pid, command=argv)

    def stderr_tail(self) -> str:
        """The last few KiB the child wrote to stderr."""
        return self._tail.text()

    def send(self, line: bytes, timeout: float) -> None:
        """Write one line; a child that does not take it within ``timeout`` seconds is killed."""
        assert self._proc.stdin is not None
        watchdog = threading.Timer(timeout, self._proc.kill)
        watchdog.daemon = True
        watchdog.start()
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise ChildFailed(self._gone("its stdin is closed")) from None
        finally:
            watchdog.cancel()

    def receive(self, timeout: float) -> StatusReply | CheckpointRequest:
        """The next protocol message; ``ChildFailed`` when it exits, writes garbage or is silent too long."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(left, 0.0)) if left > 0 else self._lines.get_nowait()
            except queue.Empty:
                raise ChildFailed(f"no answer within {timeout:g}s (timeoutInSeconds)") from None
            if line is None:
                self._lines.put(None)  # stays at the end for any later read
                raise ChildFailed(self._gone("it closed its stdout"))
            try:
                message = parse_child_line(line)
            except ProtocolError as exc:
                raise ChildFailed(f"wrote a line that is not the protocol: {exc}") from None
            if message is not None:
                return message

    def _gone(self, what: str) -> str:
        try:
            code = self._proc.wait(1.0)
        except subprocess.TimeoutExpired:
            return what
        return f"exited with code {code}"

    # -- the end ----------------------------------------------------------------------------------
    @property
    def exit_code(self) -> int | None:
        """The exit code once it has exited."""
        return self._proc.poll()

    def close(self, timeout: float) -> int | None:
        """End of input: a well-behaved client exits; after ``timeout`` seconds it is killed."""
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):  # it may have gone already
                self._proc.stdin.close()
        try:
            code: int | None = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        self._join()
        return code

    def kill(self) -> int | None:
        """Kill it now (after a failure)."""
        if self._proc.poll() is None:
            self._proc.kill()
        code = self._proc.wait()
        self._join()
        return code

    def _join(self) -> None:
        for t in self._readers:  # its stderr to the last byte, for the logs
            t.join(2.0)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()
