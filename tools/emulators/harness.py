"""The :class:`Emulators` harness: kinesis-local, moto server and the Kinesis limits proxy as children."""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from tools.emulators import settings
from tools.emulators.children import Child, LaunchSpec, child_base_env, free_port, http_ok, make_workdir
from tools.emulators.endpoints import AwsEndpoints
from tools.emulators.limits import Limits
from tools.emulators.settings import KINESIS_LOCAL_DIR, LOOPBACK, MOTO_ENTRY, EmulatorError

logger = logging.getLogger(__name__)

MAX_SPAWN_ATTEMPTS: Final = 3
#: kinesis-local's HTTP server waits up to 30 s on SIGTERM for keep-alive clients; it persists nothing.
KINESIS_TERM_GRACE: Final = 1.0
_ANY_ADDRESS_LITERAL: Final = re.compile(rb"""(["'`])0\.0\.0\.0\1""")
_ANY_ADDRESS_ANYWHERE: Final = re.compile(rb"(?<![\d.])0\.0\.0\.0(?![\d.])")
# Preloaded into node (``--require``): exit when the Python parent is gone (reparented or dead).
_PARENT_WATCH_JS: Final = """'use strict';
const parent = Number(process.env.EMULATOR_PARENT_PID);
setInterval(() => {
  try { if (process.ppid !== parent) { throw new Error('reparented'); } process.kill(parent, 0); }
  catch (e) { process.exit(0); }
}, 500).unref();
"""


def loopback_main_js(source: bytes) -> bytes:
    """kinesis-local's ``main.js`` (which binds 0.0.0.0, with no host option) bound to 127.0.0.1 instead;
    :class:`EmulatorError` rather than a wildcard address left anywhere (a release that binds differently)."""
    patched, count = _ANY_ADDRESS_LITERAL.subn(rb"\g<1>" + LOOPBACK.encode() + rb"\g<1>", source)
    if count == 0:
        raise EmulatorError('no "0.0.0.0" bind-address literal in kinesis-local main.js (a new release?)')
    if left := _ANY_ADDRESS_ANYWHERE.search(patched):
        context = patched[max(0, left.start() - 60) : left.end() + 60].decode("utf-8", "replace")
        raise EmulatorError(f"kinesis-local main.js still mentions 0.0.0.0 after patching: ...{context}...")
    return patched


class Emulators:
    """kinesis-local and moto server as child processes on free 127.0.0.1 ports; a context manager.

    A start that times out or fails raises :class:`EmulatorError` with the tail of the emulator's log.
    ``moto_serialize``: the services moto handles one request at a time (docs/emulators.md). ``limits``: the
    AWS quotas enforced (:meth:`Limits.resolve`); Kinesis calls then go through a limits proxy.
    """

    def __init__(
        self,
        *,
        start_timeout: float = 60.0,
        node: str | None = None,
        work_root: Path = settings.WORK_ROOT,
        moto_serialize: str | None = None,
        limits: Limits | Mapping[str, Any] | bool | str | None = None,
    ) -> None:
        self.start_timeout = start_timeout
        self.stop_timeout = 10.0
        serialize = os.environ.get("EMULATORS_MOTO_SERIALIZE", settings.DEFAULT_MOTO_SERIALIZE)
        self.moto_serialize = moto_serialize or serialize
        self.limits = Limits.resolve(limits)
        #: Seconds from spawn until each child answered HTTP, plus ``total`` for :meth:`start` as a whole.
        self.startup_seconds: dict[str, float] = {}
        self._node = node
        self._work_root = work_root
        self._workdir: Path | None = None
        self._children: list[Child] = []
        self._endpoints: AwsEndpoints | None = None
        self.kinesis_upstream = ""  #: kinesis-local itself, behind the limits proxy when limits are on

    @property
    def endpoints(self) -> AwsEndpoints:
        """Where the running emulators listen (the limits proxy, when on, for Kinesis)."""
        if self._endpoints is None:
            raise EmulatorError("emulators are not running; call start() or use `with Emulators() as emu:`")
        return self._endpoints

    @property
    def pids(self) -> dict[str, int]:
        """Process (group) id of each child."""
        return {child.name: child.popen.pid for child in self._children if child.popen is not None}

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client for ``service`` (:meth:`AwsEndpoints.client`)."""
        return self.endpoints.client(service, **config)

    def start(self) -> Emulators:
        """Start every child and wait until each answers; a no-op when running."""
        if self._endpoints is not None:
            return self
        began = time.monotonic()
        node = self._node or shutil.which("node")
        if node is None:
            raise EmulatorError("`node` is not on PATH; kinesis-local needs Node.js (see the Makefile)")
        workdir = self._workdir = make_workdir(self._work_root)
        atexit.register(self.stop)
        try:
            main_js = self._prepare_kinesis_local(workdir)
            kinesis = Child(
                "kinesis-local", lambda: self._kinesis_spec(node, main_js), workdir / "kinesis-local.log"
            )
            kinesis.term_grace = KINESIS_TERM_GRACE
            moto_args = [str(MOTO_ENTRY)], ["--serialize", self.moto_serialize], "/moto-api/"
            moto = Child("moto", lambda: self._python_spec(*moto_args), workdir / "moto.log")
            self._children = [kinesis, moto]
            self._spawn_and_wait(began, [kinesis, moto])
            front = kinesis
            if self.limits.enabled:  # the proxy needs kinesis-local's final port
                upstream = ["--upstream-port", kinesis.endpoint.rsplit(":", 1)[1]]
                proxy_args = ["-m", "tools.emulators.kinesis_proxy"], upstream, "/healthcheck"
                front = Child(
                    "kinesis-limits", lambda: self._python_spec(*proxy_args), workdir / "kinesis-limits.log"
                )
                self._children.append(front)
                self._spawn_and_wait(began, [front])
            for child in self._children:
                child.verify_loopback()
        except BaseException as exc:
            # Keep the logs of a failed start for a look; an interrupted one leaves nothing behind.
            self._shutdown(remove_workdir=not isinstance(exc, EmulatorError))
            raise
        self.kinesis_upstream = kinesis.endpoint
        self._endpoints = AwsEndpoints(kinesis_endpoint=front.endpoint, aws_endpoint=moto.endpoint)
        self.startup_seconds = {child.name: child.ready_seconds or 0.0 for child in self._children}
        self.startup_seconds["total"] = time.monotonic() - began
        logger.info(
            "emulators up: %s (kinesis-local %s), logs %s", self._endpoints, kinesis.endpoint, workdir
        )
        return self

    def stop(self) -> None:
        """Stop every child (SIGTERM to each process group, SIGKILL after ``stop_timeout``). Idempotent."""
        self._shutdown(remove_workdir=True)

    def check_alive(self) -> None:
        """Raise :class:`EmulatorError` (with the log tail) if an emulator process has died since start."""
        for child in self._children:
            if (code := child.exit_code()) is not None:
                raise child.failed(f"exited unexpectedly with code {code}")

    def __enter__(self) -> Emulators:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _prepare_kinesis_local(self, workdir: Path) -> Path:
        main_js = KINESIS_LOCAL_DIR / "main.js"
        if not main_js.is_file() or not (KINESIS_LOCAL_DIR / "server.json").is_file():
            raise EmulatorError(f"kinesis-local is missing in {KINESIS_LOCAL_DIR}; run `make setup` (npm ci)")
        (workdir / "kinesis-local-main.js").write_bytes(loopback_main_js(main_js.read_bytes()))
        (workdir / "parent-watch.js").write_text(_PARENT_WATCH_JS, encoding="utf-8")
        return workdir / "kinesis-local-main.js"

    def _kinesis_spec(self, node: str, main_js: Path) -> LaunchSpec:
        plain_port, tls_port = free_port(), free_port()
        while tls_port == plain_port:
            tls_port = free_port()
        env = {
            **child_base_env(),
            **settings.KINESIS_LOCAL_SETTINGS,
            "KINESIS_MOCK_PLAIN_PORT": str(plain_port),
            "KINESIS_MOCK_TLS_PORT": str(tls_port),  # also bound (to 127.0.0.1); unused
            "KINESIS_MOCK_CERT_PATH": str(KINESIS_LOCAL_DIR / "server.json"),
            "EMULATOR_PARENT_PID": str(os.getpid()),
        }
        argv = [node, "--require", str(main_js.parent / "parent-watch.js"), str(main_js)]
        return LaunchSpec(argv, env, "/healthcheck", (plain_port, tls_port))

    def _python_spec(self, entry: list[str], extra: list[str], ready_path: str) -> LaunchSpec:
        port = free_port()
        env = {
            **child_base_env(),
            "AWS_ACCESS_KEY_ID": settings.ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": settings.SECRET_ACCESS_KEY,
            "AWS_DEFAULT_REGION": settings.REGION,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(settings.REPO_ROOT),  # both import tools.emulators
        }
        argv = [sys.executable, "-P", *entry, "--port", str(port), "--parent-pid", str(os.getpid())]
        argv += ["--limits", self.limits.to_json(), *extra]
        return LaunchSpec(argv, env, ready_path, (port,))

    def _spawn_and_wait(self, began: float, pending: list[Child]) -> None:
        for child in pending:
            child.spawn()
        while pending:
            for child in list(pending):
                code = child.exit_code()
                if code is not None:
                    if child.port_conflict() and child.attempts < MAX_SPAWN_ATTEMPTS:
                        logger.info("%s: port taken by someone else, retrying on another port", child.name)
                        child.spawn()
                        continue
                    raise child.failed(f"exited with code {code} before it answered on {child.ready_url}")
                if http_ok(child.ready_url):
                    child.ready_seconds = time.monotonic() - child.started_at
                    pending.remove(child)
            if pending and time.monotonic() > began + self.start_timeout:
                late = (
                    c.failed(f"did not answer on {c.ready_url} in {self.start_timeout:.0f}s") for c in pending
                )
                raise EmulatorError("\n".join(map(str, late)))
            if pending:
                time.sleep(0.05)

    def _shutdown(self, *, remove_workdir: bool) -> None:
        children, self._children = self._children, []
        self._endpoints = None
        try:
            for child in children:
                child.terminate()
            for child in children:
                child.kill(self.stop_timeout)
        finally:
            for child in children:  # also runs on KeyboardInterrupt while waiting above
                child.kill()
            atexit.unregister(self.stop)
            workdir, self._workdir = self._workdir, None
            if workdir is not None and remove_workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            elif workdir is not None:
                logger.info("emulator logs kept in %s", workdir)
            if children:
                logger.info("emulators stopped")
