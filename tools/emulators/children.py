"""Emulator child processes (each in its own process group, with its log and start-up probe) and sockets."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import ipaddress
import logging
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tools.emulators.settings import LOOPBACK, EmulatorError

logger = logging.getLogger(__name__)

OWNER_FILE: Final = "owner.pid"
_NO_PROXY_OPENER: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def listening_addresses(port: int) -> list[str] | None:
    """Local addresses with a TCP socket listening on ``port`` (Linux ``/proc``); None where unavailable."""
    found: list[str] = []
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for fields in (line.split() for line in lines):
            addr_hex, port_hex = fields[1].split(":")
            if fields[3] == "0A" and int(port_hex, 16) == port:  # 0A = LISTEN
                # /proc prints addresses as 32-bit words in host byte order.
                raw = bytes.fromhex(addr_hex)
                words = struct.unpack(f"={len(raw) // 4}I", raw)
                found.append(str(ipaddress.ip_address(struct.pack(f">{len(words)}I", *words))))
    return found if readable else None


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """``url`` answers 2xx, fetched without any HTTP proxy."""
    try:
        with _NO_PROXY_OPENER.open(url, timeout=timeout) as response:
            return bool(200 <= response.status < 300)
    except (OSError, http.client.HTTPException):  # URLError/HTTPError are OSErrors
        return False


@dataclass
class LaunchSpec:
    """How to start a child once; it answers HTTP on the first of its ``ports``."""

    argv: list[str]
    env: dict[str, str]
    ready_path: str
    ports: tuple[int, ...]


@dataclass
class Child:
    """One emulator process in its own process group (session), logging to ``log_path``."""

    name: str
    #: A fresh spec (and ports) for each attempt: another process may take a free port before the child binds.
    make_spec: Callable[[], LaunchSpec]
    log_path: Path
    #: Seconds to wait after SIGTERM before SIGKILL (capped by the caller's stop timeout).
    term_grace: float = float("inf")
    spec: LaunchSpec | None = None
    popen: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_seconds: float | None = None
    attempts: int = 0

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>`` of the current attempt."""
        assert self.spec is not None
        return f"http://{LOOPBACK}:{self.spec.ports[0]}"

    @property
    def ready_url(self) -> str:
        """The URL probed until it answers."""
        assert self.spec is not None
        return self.endpoint + self.spec.ready_path

    def spawn(self) -> None:
        """Start (another attempt of) the process, appending to its log."""
        self.attempts += 1
        self.spec = self.make_spec()
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            log.write(f"--- {self.name} attempt {self.attempts}: {' '.join(self.spec.argv)}\n".encode())
            log.flush()
            self.started_at = time.monotonic()
            self.popen = subprocess.Popen(
                self.spec.argv,
                cwd=self.log_path.parent,
                env=self.spec.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: signals reach node/python and anything they spawn
            )

    def exit_code(self) -> int | None:
        """The exit code, or None while it runs (or before it is spawned)."""
        return None if self.popen is None else self.popen.poll()

    def port_conflict(self) -> bool:
        """Its log says the port was taken by someone else."""
        return any(word in self.log_tail() for word in ("EADDRINUSE", "Address already in use"))

    def verify_loopback(self) -> None:
        """Raise :class:`EmulatorError` if any of its ports listens on a non-loopback address."""
        assert self.spec is not None
        for port in self.spec.ports:
            if exposed := [a for a in listening_addresses(port) or [] if not _is_loopback(a)]:
                raise EmulatorError(
                    f"{self.name} listens on {', '.join(exposed)} port {port}, not only {LOOPBACK}"
                )

    def log_tail(self, max_lines: int = 40) -> str:
        """The last lines of its log."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - 16_384))
                lines = log.read().decode("utf-8", "replace").splitlines()[-max_lines:]
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"
        return "\n".join(lines) if lines else "(log is empty)"

    def failed(self, what: str) -> EmulatorError:
        """The error that says it ``what`` (e.g. "exited with code 1"), with the tail of its log."""
        log = f"--- last lines of {self.log_path} ---\n{self.log_tail()}\n--- end of {self.name} log ---"
        return EmulatorError(f"{self.name} {what}\n{log}")

    def terminate(self) -> None:
        """SIGTERM to its process group."""
        if self.popen is not None:
            _signal_group(self.popen.pid, signal.SIGTERM)

    def kill(self, grace: float = 0.0) -> None:
        """Wait up to ``grace`` seconds (at most ``term_grace``) for it to exit, then SIGKILL what is left of its
        group (idempotent)."""
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout=min(grace, self.term_grace))
        except subprocess.TimeoutExpired:
            log = logger.warning if grace and grace <= self.term_grace else logger.debug
            log("%s (pid %d) still running %.1fs after SIGTERM, killing it", self.name, self.popen.pid, grace)
        _signal_group(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def make_workdir(work_root: Path, max_age: float = 3600.0) -> Path:
    """A fresh run directory, owned by this process (``owner.pid``). First drops those that a killed run (or a
    failed start, which keeps its logs) left behind: older than ``max_age`` and whose owner is gone."""
    work_root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - max_age
    for path in work_root.glob("run-*"):
        with contextlib.suppress(OSError, ValueError):  # e.g. PermissionError: its owner runs as another user
            if path.stat().st_mtime < cutoff:
                try:
                    os.kill(int((path / OWNER_FILE).read_text()), 0)  # its owner still runs: keep it
                except (ProcessLookupError, FileNotFoundError):
                    shutil.rmtree(path, ignore_errors=True)
    workdir = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    (workdir / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return workdir


def child_base_env() -> dict[str, str]:
    """The parent's environment without AWS settings (no real credentials, profiles or regions leak in)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(0)


def child_main(argv: list[str] | None, description: str | None, **extra: type) -> argparse.Namespace:
    """In a Python child (moto, the limits proxy): its arguments (``--port``, ``--parent-pid``, ``--limits``
    and ``extra``), logging, and a watch that exits within 0.5 s of the parent going away. (SIGTERM's default
    action ends the process at once.)"""
    parser = argparse.ArgumentParser(description=description)
    for name, kind in {"port": int, "parent_pid": int, "limits": str, **extra}.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True, name="parent-watch").start()
    return args
