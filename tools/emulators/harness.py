"""The :class:`Emulators` harness: kinesis-local and moto server as child processes on free ports."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from tools.emulators.children import Child, LaunchSpec, child_base_env, remove_stale_workdirs
from tools.emulators.endpoints import AwsEndpoints
from tools.emulators.kinesis_local import loopback_main_js
from tools.emulators.limits import Limits
from tools.emulators.network import free_port
from tools.emulators.settings import (
    ACCESS_KEY_ID,
    DEFAULT_MOTO_SERIALIZE,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STOP_TIMEOUT,
    KINESIS_LOCAL_DIR,
    KINESIS_LOCAL_SETTINGS,
    KINESIS_TERM_GRACE,
    LOOPBACK,
    MAX_SPAWN_ATTEMPTS,
    MOTO_ENTRY,
    OWNER_FILE,
    PARENT_WATCH_JS,
    POLL_INTERVAL,
    REGION,
    REPO_ROOT,
    SECRET_ACCESS_KEY,
    WORK_ROOT,
    EmulatorError,
)

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- Emulators


class Emulators:
    """kinesis-local and moto server as child processes on free 127.0.0.1 ports.

    Use as a context manager, or call :meth:`start` and :meth:`stop` (idempotent). ``start_timeout`` bounds
    how long both may take to answer HTTP (default 60 s, or ``$EMULATORS_START_TIMEOUT``); on timeout or an
    early exit, :class:`EmulatorError` carries the tail of that emulator's log. ``moto_serialize`` names the
    services moto handles one request at a time (default ``dynamodb,s3``, or ``$EMULATORS_MOTO_SERIALIZE``;
    ``none`` is moto's threaded server as it comes, which does not isolate transactions). ``limits`` are the
    AWS quotas enforced (:class:`~tools.emulators.limits.Limits`; default: AWS's values, changed by
    ``$EMULATORS_LIMITS`` / ``$EMULATORS_LIMIT_<NAME>``; ``"off"`` or ``False`` for none): Kinesis calls then
    go through a limits proxy in front of kinesis-local, and moto enforces the DynamoDB ones.
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
        limits: Limits | Mapping[str, Any] | bool | str | None = None,
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
        #: The AWS quotas the emulators enforce (docs/emulators.md).
        self.limits = Limits.resolve(limits)
        self._kinesis_upstream: str | None = None
        self._node = node
        self._python = python or sys.executable
        self._kinesis_local_dir = kinesis_local_dir
        self._work_root = work_root
        self._workdir: Path | None = None
        self._children: list[Child] = []
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
    def kinesis_upstream(self) -> str:
        """kinesis-local itself, behind the limits proxy (the same as ``kinesis_endpoint`` with limits off)."""
        self.endpoints  # noqa: B018 - raises when not running
        assert self._kinesis_upstream is not None
        return self._kinesis_upstream

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
                    Child(
                        "kinesis-local",
                        lambda: self._kinesis_spec(node, kinesis_main, watch_js),
                        self._workdir,
                        self._workdir / "kinesis-local.log",
                        # On SIGTERM its HTTP server waits up to 30 s for clients' keep-alive connections
                        # to close; without persistence there is nothing to lose by killing it sooner.
                        term_grace=None if self._kinesis_persists() else KINESIS_TERM_GRACE,
                    ),
                    Child("moto", self._moto_spec, self._workdir, self._workdir / "moto.log"),
                ]
                for child in self._children:
                    child.spawn()
                self._wait_until_ready(began + self.start_timeout)
                kinesis, moto = self._children
                front = kinesis
                if self.limits.enabled:
                    # The limits proxy starts once kinesis-local listens (it needs its final port).
                    front = Child(
                        "kinesis-limits",
                        lambda: self._limits_spec(kinesis),
                        self._workdir,
                        self._workdir / "kinesis-limits.log",
                    )
                    self._children.append(front)
                    front.spawn()
                    self._wait_until_ready(began + self.start_timeout, [front])
                for child in self._children:
                    child.verify_loopback()
            except BaseException as exc:
                # Keep the logs of a failed start for a look; an interrupted one leaves nothing behind.
                self._shutdown(remove_workdir=not isinstance(exc, EmulatorError))
                raise
            self._kinesis_upstream = kinesis.endpoint
            self._endpoints = AwsEndpoints(kinesis_endpoint=front.endpoint, aws_endpoint=moto.endpoint)
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
                remove_stale_workdirs(self._work_root)
                workdir = Path(tempfile.mkdtemp(prefix="run-", dir=self._work_root))
                (workdir / OWNER_FILE).write_text(f"{os.getpid()}\n")
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
        watch_js.write_text(PARENT_WATCH_JS, encoding="utf-8")
        return patched, watch_js

    def _kinesis_persists(self) -> bool:
        return self.kinesis_settings.get("SHOULD_PERSIST_DATA", "false").lower() == "true"

    def _kinesis_spec(self, node: str, main_js: Path, watch_js: Path) -> LaunchSpec:
        plain_port, tls_port = free_port(), free_port()
        while tls_port == plain_port:
            tls_port = free_port()
        env = child_base_env()
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
        return LaunchSpec(
            argv=[node, "--require", str(watch_js), str(main_js)],
            env=env,
            endpoint=f"http://{LOOPBACK}:{plain_port}",
            ready_path="/healthcheck",
            ports=(plain_port, tls_port),
        )

    def _moto_spec(self) -> LaunchSpec:
        port = free_port()
        env = child_base_env()
        env.update(
            {
                "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
                "AWS_DEFAULT_REGION": REGION,
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(REPO_ROOT),  # _emulator_moto imports tools.emulators.dynamodb_limiter
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
            "--limits",
            self.limits.to_json(),
        ]
        if self.verbose:
            argv.append("--verbose")
        return LaunchSpec(
            argv=argv, env=env, endpoint=f"http://{LOOPBACK}:{port}", ready_path="/moto-api/", ports=(port,)
        )

    def _limits_spec(self, kinesis: Child) -> LaunchSpec:
        port = free_port()
        upstream_port = kinesis.endpoint.rsplit(":", 1)[1]
        env = child_base_env()
        env.update({"PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"})
        argv = [
            self._python,
            "-P",
            "-m",
            "tools.emulators.kinesis_proxy",
            "--port",
            str(port),
            "--upstream-port",
            upstream_port,
            "--parent-pid",
            str(os.getpid()),
            "--limits",
            self.limits.to_json(),
        ]
        return LaunchSpec(
            argv=argv, env=env, endpoint=f"http://{LOOPBACK}:{port}", ready_path="/healthcheck", ports=(port,)
        )

    def _wait_until_ready(self, deadline: float, children: list[Child] | None = None) -> None:
        pending = list(self._children if children is None else children)
        while pending:
            for child in list(pending):
                code = child.exit_code()
                if code is not None:
                    if child.port_conflict() and child.attempts < MAX_SPAWN_ATTEMPTS:
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
            time.sleep(POLL_INTERVAL)

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
