"""One emulator child process in its own process group, with its log, start-up probe and shutdown."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tools.emulators.network import http_ok, is_loopback, listening_addresses
from tools.emulators.settings import (
    LOOPBACK,
    OWNER_FILE,
    POLL_INTERVAL,
    PORT_IN_USE,
    STALE_WORKDIR_SECONDS,
    EmulatorError,
)

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------ child processes


@dataclass
class LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    endpoint: str
    ready_path: str
    ports: tuple[int, ...]


@dataclass
class Child:
    """One emulator process in its own process group (session), logging to ``log_path``."""

    name: str
    make_spec: Callable[[], LaunchSpec]
    cwd: Path
    log_path: Path
    spec: LaunchSpec | None = None
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_seconds: float | None = None
    attempts: int = 0
    #: Seconds to wait after SIGTERM before SIGKILL; None = the caller's stop timeout.
    term_grace: float | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str:
        assert self.spec is not None
        return self.spec.endpoint

    @property
    def ready_url(self) -> str:
        assert self.spec is not None
        return self.spec.endpoint + self.spec.ready_path

    def spawn(self) -> None:
        self.attempts += 1
        self.spec = self.make_spec()
        self._close_log()
        self._log = self.log_path.open("ab")
        self._log.write(f"--- {self.name} attempt {self.attempts}: {' '.join(self.spec.argv)}\n".encode())
        self._log.flush()
        self.started_at = time.monotonic()
        self.ready_seconds = None
        self.popen = subprocess.Popen(
            self.spec.argv,
            cwd=self.cwd,
            env=self.spec.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: signals reach node/python and anything they spawn
            close_fds=True,
        )
        logger.debug("%s: started pid %d on %s", self.name, self.popen.pid, self.spec.endpoint)

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def port_conflict(self) -> bool:
        tail = self.log_tail()
        return any(marker in tail for marker in PORT_IN_USE)

    def probe(self) -> bool:
        return http_ok(self.ready_url)

    def verify_loopback(self) -> None:
        assert self.spec is not None
        for port in self.spec.ports:
            addresses = listening_addresses(port)
            if addresses is None:
                logger.debug("%s: /proc/net/tcp unavailable, cannot double-check the bind address", self.name)
                return
            exposed = [address for address in addresses if not is_loopback(address)]
            if exposed:
                raise EmulatorError(
                    f"{self.name} listens on {', '.join(exposed)} port {port}, not only on {LOOPBACK}"
                )

    def log_tail(self, max_lines: int = 40, max_bytes: int = 16_384) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                size = log.tell()
                log.seek(max(0, size - max_bytes))
                data = log.read()
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"
        lines = data.decode("utf-8", "replace").splitlines()[-max_lines:]
        return "\n".join(lines) if lines else "(log is empty)"

    def describe_failure(self, headline: str) -> str:
        return (
            f"{headline}\n--- last lines of {self.log_path} ---\n{self.log_tail()}\n"
            f"--- end of {self.name} log ---"
        )

    def terminate(self) -> None:
        if self.popen is not None:
            _signal_group(self.popen.pid, signal.SIGTERM)

    def wait_or_kill(self, timeout: float) -> None:
        """Wait for the group leader and the rest of its group to exit; SIGKILL them after ``timeout``
        (or after ``term_grace``, for an emulator whose graceful shutdown is known to be slow)."""
        if self.popen is None:
            return
        pgid = self.popen.pid
        grace = timeout if self.term_grace is None else min(timeout, self.term_grace)
        deadline = time.monotonic() + timeout
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log = logger.debug if self.term_grace is not None else logger.warning
            log("%s (pid %d) still running %.1fs after SIGTERM, killing it", self.name, pgid, grace)
            _signal_group(pgid, signal.SIGKILL)
            self.popen.wait(timeout=5)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL)
        if _group_alive(pgid):
            logger.warning("%s: group %d outlived its leader, killing it", self.name, pgid)
            _signal_group(pgid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL whatever is left of the group (idempotent backstop) and release the log file."""
        if self.popen is not None:
            _signal_group(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_workdirs(work_root: Path, max_age: float = STALE_WORKDIR_SECONDS) -> None:
    """Drop run directories that a killed run (or a failed start, which keeps its logs) left behind: older
    than ``max_age`` and whose owner process (``owner.pid``) is gone. Other sessions' live runs are kept."""
    cutoff = time.time() - max_age
    for path in work_root.glob("run-*"):
        with contextlib.suppress(OSError, ValueError):
            if not path.is_dir() or path.stat().st_mtime >= cutoff:
                continue
            owner = path / OWNER_FILE
            if owner.is_file() and _process_alive(int(owner.read_text().strip())):
                continue
            shutil.rmtree(path, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def child_base_env() -> dict[str, str]:
    """The parent's environment without AWS settings (no real credentials, profiles or regions leak in)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
