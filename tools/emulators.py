"""Local AWS emulators for integration tests and the demo.

Two child processes, both bound to 127.0.0.1 on free ports:

* kinesis-local (npm, ``node_modules/kinesis-local``) for Kinesis Data Streams, plain HTTP. The package binds
  0.0.0.0 and has no host option, so a copy of its ``main.js`` with the bind address replaced by 127.0.0.1 is
  run (the replacement is checked, and the listening sockets are checked again once it is up).
* moto server (PyPI ``moto[server]``) for DynamoDB, SQS, S3 and every other service, all on one port.

Usage::

    with Emulators() as emu:
        kinesis = emu.endpoints.client("kinesis")
        dynamodb = emu.endpoints.client("dynamodb")

or from a shell: ``python -m tools.emulators [--format env]`` prints the endpoints and runs until
Ctrl-C/SIGTERM.

Children run in their own process groups; :meth:`Emulators.stop` sends SIGTERM to each group, then SIGKILL
after a grace period. ``atexit`` stops anything still running, and each child also exits on its own within
about a second when the Python process that started it dies (it polls its parent pid), so even a SIGKILLed
test run leaves no orphaned node or Python servers.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import http.client
import ipaddress
import json
import logging
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Final

import boto3
from botocore.config import Config

logger = logging.getLogger(__name__)

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
KINESIS_LOCAL_DIR: Final = REPO_ROOT / "node_modules" / "kinesis-local"
WORK_ROOT: Final = REPO_ROOT / ".emulators"
MOTO_ENTRY: Final = Path(__file__).resolve().parent / "_emulator_moto.py"

LOOPBACK: Final = "127.0.0.1"
REGION: Final = "us-east-1"
ACCESS_KEY_ID: Final = "testing"
SECRET_ACCESS_KEY: Final = "testing"
#: moto's default account; kinesis-local is configured to use the same one so ARNs agree across services.
ACCOUNT_ID: Final = "123456789012"

DEFAULT_START_TIMEOUT: Final = 60.0
DEFAULT_STOP_TIMEOUT: Final = 10.0
_POLL_INTERVAL: Final = 0.05
_MAX_SPAWN_ATTEMPTS: Final = 3
_STALE_WORKDIR_SECONDS: Final = 3600.0
_OWNER_FILE: Final = "owner.pid"
_KINESIS_TERM_GRACE: Final = 1.0
#: moto handles DynamoDB (+ Streams) and S3 requests one at a time, so conditional writes and transactions
#: are atomic as on AWS. ``EMULATORS_MOTO_SERIALIZE=none`` restores moto's unsafe threaded server.
DEFAULT_MOTO_SERIALIZE: Final = "dynamodb,s3"

#: Environment for kinesis-local: every simulated state transition instant ("0ms" is accepted; a 2-shard
#: stream is ACTIVE on the first DescribeStreamSummary), limits high enough that a whole test session can
#: keep creating uniquely named streams, no persistence.
KINESIS_LOCAL_SETTINGS: Final[Mapping[str, str]] = {
    "CREATE_STREAM_DURATION": "0ms",
    "DELETE_STREAM_DURATION": "0ms",
    "REGISTER_STREAM_CONSUMER_DURATION": "0ms",
    "DEREGISTER_STREAM_CONSUMER_DURATION": "0ms",
    "START_STREAM_ENCRYPTION_DURATION": "0ms",
    "STOP_STREAM_ENCRYPTION_DURATION": "0ms",
    "MERGE_SHARDS_DURATION": "0ms",
    "SPLIT_SHARD_DURATION": "0ms",
    "UPDATE_SHARD_COUNT_DURATION": "0ms",
    "UPDATE_STREAM_MODE_DURATION": "0ms",
    "SHARD_LIMIT": "100000",
    "ON_DEMAND_STREAM_COUNT_LIMIT": "10000",
    "AWS_REGION": REGION,
    "AWS_ACCOUNT_ID": ACCOUNT_ID,
    "LOG_LEVEL": "WARN",
    "ROOT_LOG_LEVEL": "ERROR",
    "SHOULD_PERSIST_DATA": "false",
    "LOAD_DATA_IF_EXISTS": "false",
}

# Preloaded into node (``--require``): exit when the Python parent is gone (reparented or dead).
_PARENT_WATCH_JS: Final = """'use strict';
const parent = Number(process.env.EMULATOR_PARENT_PID || 0);
if (parent > 0) {
  setInterval(() => {
    let alive = process.ppid === parent;
    if (alive) {
      try { process.kill(parent, 0); } catch (e) { alive = false; }
    }
    if (!alive) { process.exit(0); }
  }, 500).unref();
}
"""

_ANY_ADDRESS_LITERAL: Final = re.compile(rb"""(["'`])0\.0\.0\.0\1""")
_ANY_ADDRESS_ANYWHERE: Final = re.compile(rb"(?<![\d.])0\.0\.0\.0(?![\d.])")
_PORT_IN_USE: Final = ("EADDRINUSE", "Address already in use")


class EmulatorError(RuntimeError):
    """An emulator could not be prepared, did not come up in time, or died."""


# --------------------------------------------------------------------------------------------- boto3 clients


def client_config(**overrides: Any) -> Config:
    """botocore ``Config`` for talking to a local emulator.

    Short connect timeout (loopback), a generous read timeout (kinesis-local slows down as streams grow),
    3 standard-mode attempts, and ``proxies={}`` so an ``HTTP(S)_PROXY`` in the environment is never used:
    traffic goes straight to 127.0.0.1. Keyword arguments override any of these.
    """
    settings: dict[str, Any] = {
        "retries": {"mode": "standard", "max_attempts": 3},
        "connect_timeout": 2,
        "read_timeout": 30,
        "max_pool_connections": 32,
        "proxies": {},
    }
    settings.update(overrides)
    return Config(**settings)


def client_kwargs(endpoint_url: str, *, region: str = REGION, **config: Any) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client(service, **kwargs)`` against a local emulator endpoint."""
    _require_loopback_url(endpoint_url)
    return {
        "endpoint_url": endpoint_url,
        "region_name": region,
        "aws_access_key_id": ACCESS_KEY_ID,
        "aws_secret_access_key": SECRET_ACCESS_KEY,
        "config": client_config(**config),
    }


@dataclass(frozen=True)
class AwsEndpoints:
    """Where the emulators listen, and the one way everybody builds clients for them."""

    kinesis_endpoint: str
    aws_endpoint: str
    region: str = REGION

    def __post_init__(self) -> None:
        _require_loopback_url(self.kinesis_endpoint)
        _require_loopback_url(self.aws_endpoint)

    def endpoint_for(self, service: str) -> str:
        """kinesis-local for ``kinesis``; moto for everything else (dynamodb, dynamodbstreams, sqs, s3...)."""
        return self.kinesis_endpoint if service == "kinesis" else self.aws_endpoint

    def client_kwargs(self, service: str, **config: Any) -> dict[str, Any]:
        """Kwargs for ``boto3.client(service, **kwargs)``; ``config`` overrides the botocore Config."""
        return client_kwargs(self.endpoint_for(service), region=self.region, **config)

    def client(self, service: str, *, session: boto3.session.Session | None = None, **config: Any) -> Any:
        """A boto3 client for ``service`` (from ``session`` if given, which is faster for many clients)."""
        factory: Any = session if session is not None else boto3
        return factory.client(service, **self.client_kwargs(service, **config))

    def env(self) -> dict[str, str]:
        """Environment for a child process (consumer, demo) so that plain boto3 reaches the emulators."""
        return {
            "AWS_ENDPOINT_URL": self.aws_endpoint,
            "AWS_ENDPOINT_URL_KINESIS": self.kinesis_endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "EMULATORS_KINESIS_ENDPOINT": self.kinesis_endpoint,
            "EMULATORS_AWS_ENDPOINT": self.aws_endpoint,
        }

    def as_dict(self) -> dict[str, str]:
        return {
            "kinesis_endpoint": self.kinesis_endpoint,
            "aws_endpoint": self.aws_endpoint,
            "region": self.region,
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AwsEndpoints | None:
        """Endpoints of already running emulators (``EMULATORS_KINESIS_ENDPOINT``/``EMULATORS_AWS_ENDPOINT``,
        as printed by ``python -m tools.emulators --format env``), or None when not both are set."""
        env = os.environ if environ is None else environ
        kinesis, aws = env.get("EMULATORS_KINESIS_ENDPOINT"), env.get("EMULATORS_AWS_ENDPOINT")
        if not kinesis or not aws:
            return None
        return cls(kinesis_endpoint=kinesis, aws_endpoint=aws, region=env.get("EMULATORS_REGION", REGION))


def _require_loopback_url(url: str) -> None:
    host = urllib.parse.urlsplit(url).hostname
    if host not in {LOOPBACK, "localhost"}:
        raise EmulatorError(f"emulator endpoint {url!r} is not on 127.0.0.1; refusing to send traffic there")


# ------------------------------------------------------------------------------------ kinesis-local patching


def loopback_main_js(source: bytes) -> bytes:
    """kinesis-local's ``main.js`` with its hard-coded ``"0.0.0.0"`` bind address replaced by 127.0.0.1.

    Raises :class:`EmulatorError` if there is no such literal (a new release changed how it binds) or if a
    wildcard address is still left after the replacement, rather than silently listening on every interface.
    """
    patched, count = _ANY_ADDRESS_LITERAL.subn(lambda m: m.group(1) + LOOPBACK.encode() + m.group(1), source)
    if count == 0:
        raise EmulatorError(
            'kinesis-local main.js has no "0.0.0.0" bind-address literal to replace; its release changed, '
            "so it cannot be bound to 127.0.0.1 safely (update tools/emulators.py)"
        )
    left = _ANY_ADDRESS_ANYWHERE.search(patched)
    if left is not None:
        context = patched[max(0, left.start() - 60) : left.end() + 60].decode("utf-8", "replace")
        raise EmulatorError(f"kinesis-local main.js still mentions 0.0.0.0 after patching: ...{context}...")
    logger.debug("kinesis-local main.js: replaced %d bind-address literal(s) with %s", count, LOOPBACK)
    return patched


# ------------------------------------------------------------------------------------------ ports, sockets


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _decode_proc_address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_addr)
    # /proc/net/tcp{,6} print addresses as 32-bit words in host byte order.
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    packed = struct.pack(f">{len(words)}I", *words)
    return ipaddress.ip_address(packed)


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
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr_hex, port_hex = fields[1].split(":")
            if int(port_hex, 16) == port:
                found.append(str(_decode_proc_address(addr_hex)))
    return found if readable else None


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


_NO_PROXY_OPENER: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with _NO_PROXY_OPENER.open(url, timeout=timeout) as response:
            return bool(200 <= response.status < 300)
    except (OSError, http.client.HTTPException):  # URLError/HTTPError are OSErrors
        return False


# ------------------------------------------------------------------------------------------ child processes


@dataclass
class _LaunchSpec:
    argv: list[str]
    env: dict[str, str]
    endpoint: str
    ready_path: str
    ports: tuple[int, ...]


@dataclass
class _Child:
    """One emulator process in its own process group (session), logging to ``log_path``."""

    name: str
    make_spec: Callable[[], _LaunchSpec]
    cwd: Path
    log_path: Path
    spec: _LaunchSpec | None = None
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
        return any(marker in tail for marker in _PORT_IN_USE)

    def probe(self) -> bool:
        return _http_ok(self.ready_url)

    def verify_loopback(self) -> None:
        assert self.spec is not None
        for port in self.spec.ports:
            addresses = listening_addresses(port)
            if addresses is None:
                logger.debug("%s: /proc/net/tcp unavailable, cannot double-check the bind address", self.name)
                return
            exposed = [address for address in addresses if not _is_loopback(address)]
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
            time.sleep(_POLL_INTERVAL)
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


def _remove_stale_workdirs(work_root: Path, max_age: float = _STALE_WORKDIR_SECONDS) -> None:
    """Drop run directories that a killed run (or a failed start, which keeps its logs) left behind: older
    than ``max_age`` and whose owner process (``owner.pid``) is gone. Other sessions' live runs are kept."""
    cutoff = time.time() - max_age
    for path in work_root.glob("run-*"):
        with contextlib.suppress(OSError, ValueError):
            if not path.is_dir() or path.stat().st_mtime >= cutoff:
                continue
            owner = path / _OWNER_FILE
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


def _child_base_env() -> dict[str, str]:
    """The parent's environment without AWS settings (no real credentials, profiles or regions leak in)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}


# --------------------------------------------------------------------------------------------- Emulators


class Emulators:
    """kinesis-local and moto server as child processes on free 127.0.0.1 ports.

    Use as a context manager, or call :meth:`start` and :meth:`stop` (idempotent). ``start_timeout`` bounds
    how long both may take to answer HTTP (default 60 s, or ``$EMULATORS_START_TIMEOUT``); on timeout or an
    early exit, :class:`EmulatorError` carries the tail of that emulator's log. ``moto_serialize`` names the
    services moto handles one request at a time (default ``dynamodb,s3``, or ``$EMULATORS_MOTO_SERIALIZE``;
    ``none`` is moto's threaded server as it comes, which does not isolate transactions).
    """

    def __init__(
        self,
        *,
        start_timeout: float | None = None,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        kinesis_settings: Mapping[str, str] | None = None,
        verbose: bool = False,
        node: str | None = None,
        python: str | None = None,
        kinesis_local_dir: Path = KINESIS_LOCAL_DIR,
        work_root: Path | None = WORK_ROOT,
        moto_serialize: str | None = None,
    ) -> None:
        if start_timeout is None:
            start_timeout = float(os.environ.get("EMULATORS_START_TIMEOUT", DEFAULT_START_TIMEOUT))
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.kinesis_settings: dict[str, str] = {**KINESIS_LOCAL_SETTINGS, **(kinesis_settings or {})}
        self.verbose = verbose
        if moto_serialize is None:
            moto_serialize = os.environ.get("EMULATORS_MOTO_SERIALIZE", DEFAULT_MOTO_SERIALIZE)
        #: Services whose requests moto handles one at a time (docs/emulators.md); "none" = moto as it comes.
        self.moto_serialize = moto_serialize
        self._node = node
        self._python = python or sys.executable
        self._kinesis_local_dir = kinesis_local_dir
        self._work_root = work_root
        self._workdir: Path | None = None
        self._children: list[_Child] = []
        self._endpoints: AwsEndpoints | None = None
        self._lock = threading.RLock()
        #: Seconds from spawn until each emulator answered HTTP, plus ``total`` for :meth:`start` as a whole.
        self.startup_seconds: dict[str, float] = {}

    # -- public API

    @property
    def endpoints(self) -> AwsEndpoints:
        if self._endpoints is None:
            raise EmulatorError("emulators are not running; call start() or use `with Emulators() as emu:`")
        return self._endpoints

    @property
    def kinesis_endpoint(self) -> str:
        return self.endpoints.kinesis_endpoint

    @property
    def aws_endpoint(self) -> str:
        return self.endpoints.aws_endpoint

    @property
    def running(self) -> bool:
        return self._endpoints is not None

    @property
    def pids(self) -> dict[str, int]:
        return {child.name: child.popen.pid for child in self._children if child.popen is not None}

    @property
    def log_paths(self) -> dict[str, Path]:
        return {child.name: child.log_path for child in self._children}

    def client(self, service: str, **config: Any) -> Any:
        return self.endpoints.client(service, **config)

    def start(self) -> Emulators:
        with self._lock:
            if self._endpoints is not None:
                return self
            began = time.monotonic()
            node = self._find_node()
            self._workdir = self._make_workdir()
            atexit.register(self.stop)
            try:
                kinesis_main, watch_js = self._prepare_kinesis_local(self._workdir)
                self._children = [
                    _Child(
                        "kinesis-local",
                        lambda: self._kinesis_spec(node, kinesis_main, watch_js),
                        self._workdir,
                        self._workdir / "kinesis-local.log",
                        # On SIGTERM its HTTP server waits up to 30 s for clients' keep-alive connections
                        # to close; without persistence there is nothing to lose by killing it sooner.
                        term_grace=None if self._kinesis_persists() else _KINESIS_TERM_GRACE,
                    ),
                    _Child("moto", self._moto_spec, self._workdir, self._workdir / "moto.log"),
                ]
                for child in self._children:
                    child.spawn()
                self._wait_until_ready(began + self.start_timeout)
                for child in self._children:
                    child.verify_loopback()
            except BaseException as exc:
                # Keep the logs of a failed start for a look; an interrupted one leaves nothing behind.
                self._shutdown(remove_workdir=not isinstance(exc, EmulatorError))
                raise
            kinesis, moto = self._children
            self._endpoints = AwsEndpoints(kinesis_endpoint=kinesis.endpoint, aws_endpoint=moto.endpoint)
            for child in self._children:
                self.startup_seconds[child.name] = child.ready_seconds or 0.0
            self.startup_seconds["total"] = time.monotonic() - began
            logger.info(
                "emulators up in %.2fs: kinesis-local %s (%.2fs), moto %s (%.2fs); logs in %s",
                self.startup_seconds["total"],
                kinesis.endpoint,
                self.startup_seconds[kinesis.name],
                moto.endpoint,
                self.startup_seconds[moto.name],
                self._workdir,
            )
            return self

    def stop(self) -> None:
        """Stop both emulators (SIGTERM to each process group, SIGKILL after ``stop_timeout``). Idempotent."""
        with self._lock:
            self._shutdown(remove_workdir=True)

    def check_alive(self) -> None:
        """Raise :class:`EmulatorError` (with the log tail) if an emulator process has died since start."""
        for child in self._children:
            code = child.exit_code()
            if code is not None:
                message = f"{child.name} exited unexpectedly with code {code}"
                raise EmulatorError(child.describe_failure(message))

    def __enter__(self) -> Emulators:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._endpoints.as_dict() if self._endpoints is not None else "stopped"
        return f"Emulators({state})"

    # -- internals

    def _find_node(self) -> str:
        node = self._node or shutil.which("node")
        if node is None:
            raise EmulatorError("`node` is not on PATH; kinesis-local needs Node.js (see the Makefile)")
        return node

    def _make_workdir(self) -> Path:
        if self._work_root is not None:
            try:
                self._work_root.mkdir(parents=True, exist_ok=True)
                _remove_stale_workdirs(self._work_root)
                workdir = Path(tempfile.mkdtemp(prefix="run-", dir=self._work_root))
                (workdir / _OWNER_FILE).write_text(f"{os.getpid()}\n")
                return workdir
            except OSError as exc:
                logger.debug("cannot use %s (%s), using the system temp dir", self._work_root, exc)
        return Path(tempfile.mkdtemp(prefix="emulators-"))

    def _prepare_kinesis_local(self, workdir: Path) -> tuple[Path, Path]:
        main_js = self._kinesis_local_dir / "main.js"
        cert = self._kinesis_local_dir / "server.json"
        if not main_js.is_file() or not cert.is_file():
            raise EmulatorError(
                f"kinesis-local is missing ({main_js} / {cert}); run `make setup` (npm ci) in {REPO_ROOT}"
            )
        patched = workdir / "kinesis-local-main.js"
        patched.write_bytes(loopback_main_js(main_js.read_bytes()))
        watch_js = workdir / "parent-watch.js"
        watch_js.write_text(_PARENT_WATCH_JS, encoding="utf-8")
        return patched, watch_js

    def _kinesis_persists(self) -> bool:
        return self.kinesis_settings.get("SHOULD_PERSIST_DATA", "false").lower() == "true"

    def _kinesis_spec(self, node: str, main_js: Path, watch_js: Path) -> _LaunchSpec:
        plain_port, tls_port = free_port(), free_port()
        while tls_port == plain_port:
            tls_port = free_port()
        env = _child_base_env()
        env.update(self.kinesis_settings)
        env.update(
            {
                "KINESIS_MOCK_PLAIN_PORT": str(plain_port),
                "KINESIS_MOCK_TLS_PORT": str(tls_port),  # also bound (to 127.0.0.1); unused
                "KINESIS_MOCK_CERT_PATH": str(self._kinesis_local_dir / "server.json"),
                "EMULATOR_PARENT_PID": str(os.getpid()),
            }
        )
        if self.verbose:
            env["LOG_LEVEL"] = "DEBUG"
        return _LaunchSpec(
            argv=[node, "--require", str(watch_js), str(main_js)],
            env=env,
            endpoint=f"http://{LOOPBACK}:{plain_port}",
            ready_path="/healthcheck",
            ports=(plain_port, tls_port),
        )

    def _moto_spec(self) -> _LaunchSpec:
        port = free_port()
        env = _child_base_env()
        env.update(
            {
                "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
                "AWS_DEFAULT_REGION": REGION,
                "PYTHONUNBUFFERED": "1",
            }
        )
        argv = [
            self._python,
            "-P",
            str(MOTO_ENTRY),
            "--port",
            str(port),
            "--parent-pid",
            str(os.getpid()),
            "--serialize",
            self.moto_serialize,
        ]
        if self.verbose:
            argv.append("--verbose")
        return _LaunchSpec(
            argv=argv, env=env, endpoint=f"http://{LOOPBACK}:{port}", ready_path="/moto-api/", ports=(port,)
        )

    def _wait_until_ready(self, deadline: float) -> None:
        pending = list(self._children)
        while pending:
            for child in list(pending):
                code = child.exit_code()
                if code is not None:
                    if child.port_conflict() and child.attempts < _MAX_SPAWN_ATTEMPTS:
                        logger.info("%s: port taken by someone else, retrying on another port", child.name)
                        child.spawn()
                        continue
                    raise EmulatorError(
                        child.describe_failure(
                            f"{child.name} exited with code {code} before it answered on {child.ready_url}"
                        )
                    )
                if child.probe():
                    child.ready_seconds = time.monotonic() - child.started_at
                    logger.debug("%s ready after %.2fs", child.name, child.ready_seconds)
                    pending.remove(child)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise EmulatorError(
                    "\n".join(
                        child.describe_failure(
                            f"{child.name} did not answer on {child.ready_url} "
                            f"within {self.start_timeout:.0f}s "
                            f"(pid {child.popen.pid if child.popen else '?'} still running)"
                        )
                        for child in pending
                    )
                )
            time.sleep(_POLL_INTERVAL)

    def _shutdown(self, *, remove_workdir: bool) -> None:
        children, self._children = self._children, []
        self._endpoints = None
        try:
            for child in children:
                child.terminate()
            for child in children:
                child.wait_or_kill(self.stop_timeout)
        finally:
            for child in children:  # also runs on KeyboardInterrupt while waiting above
                child.kill()
            atexit.unregister(self.stop)
            workdir, self._workdir = self._workdir, None
            if workdir is not None:
                if remove_workdir:
                    shutil.rmtree(workdir, ignore_errors=True)
                else:
                    logger.info("emulator logs kept in %s", workdir)
            if children:
                logger.info("emulators stopped")


@contextlib.contextmanager
def running_emulators(**kwargs: Any) -> Iterator[Emulators]:
    """``with running_emulators() as emu:`` — the same as ``with Emulators(**kwargs) as emu:``."""
    with Emulators(**kwargs) as emulators:
        yield emulators


# --------------------------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.emulators",
        description="Run kinesis-local and moto server on 127.0.0.1 until Ctrl-C or SIGTERM.",
    )
    parser.add_argument(
        "--format",
        choices=("json", "env"),
        default="json",
        help="print the endpoints as one JSON object (default) or as KEY=value environment lines",
    )
    parser.add_argument("--timeout", type=float, default=None, help="start-up timeout in seconds")
    parser.add_argument("--verbose", action="store_true", help="debug logging, and emulator request logs")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("received %s, stopping", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGHUP, request_stop)
    try:
        with Emulators(start_timeout=args.timeout, verbose=args.verbose) as emulators:
            endpoints = emulators.endpoints
            if args.format == "json":
                payload: dict[str, Any] = {
                    **endpoints.as_dict(),
                    "access_key_id": ACCESS_KEY_ID,
                    "secret_access_key": SECRET_ACCESS_KEY,
                    "pids": emulators.pids,
                    "logs": {name: str(path) for name, path in emulators.log_paths.items()},
                    "startup_seconds": {k: round(v, 3) for k, v in emulators.startup_seconds.items()},
                }
                print(json.dumps(payload), flush=True)
            else:
                for key, value in endpoints.env().items():
                    print(f"{key}={value}", flush=True)
            while not stop_requested.wait(0.5):
                emulators.check_alive()
    except KeyboardInterrupt:
        logger.info("interrupted, emulators stopped")
    except EmulatorError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
