"""Child-process entry point for the moto server used by :mod:`tools.emulators`.

Run as a script (``python -P tools/_emulator_moto.py --port N --parent-pid P``); tests import it only to
check :class:`SerializedApp` directly.
It always binds 127.0.0.1, keeps werkzeug's per-request log quiet unless ``--verbose``, and exits by itself
when its parent process dies, so a killed test run cannot leave an orphaned server behind.

Isolation: moto's own server is threaded and its backends take no locks, so concurrent requests interleave
(a failing TransactWriteItems restores a copy of the tables taken when it began, over other requests'
writes). Here the server stays threaded (connections, keep-alive and request parsing run in parallel), but
every request to a *serialized* service runs alone: its body is read first, then the request is handled and
its whole response produced under that service's lock. ``--serialize dynamodb,s3`` is the default;
``--serialize none`` runs moto exactly as it comes (the old, unsafe way; for showing what the lock fixes).
SQS is not serialized by default: moto's ReceiveMessage long poll waits inside the request for a message
that only another request can send.

Limits: with ``--limits <JSON>`` (:class:`tools.emulators.limits.Limits`), DynamoDB requests past AWS's
throughput per table and per partition key are answered with ProvisionedThroughputExceededException or
ThrottlingException (:class:`LimitedApp`, docs/emulators.md); the repository root must be importable.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType, SimpleNamespace
from typing import Any

LOOPBACK = "127.0.0.1"
DEFAULT_SERIALIZED = ("dynamodb", "s3")

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _watch_parent(parent_pid: int, interval: float) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(interval)


def signing_service(environ: dict[str, Any]) -> str | None:
    """The service a SigV4-signed request is for (its credential scope), e.g. ``dynamodb``; None if unsigned.

    DynamoDB Streams is signed as ``dynamodb`` too, so it shares DynamoDB's lock (its backend reads the
    tables' stream records).
    """
    auth = environ.get("HTTP_AUTHORIZATION") or ""
    marker = "Credential="
    start = auth.find(marker)
    if start < 0:
        return None
    scope = auth[start + len(marker) :].split(",", 1)[0].strip().split("/")
    return scope[3].lower() if len(scope) == 5 else None


def _buffer_body(environ: dict[str, Any]) -> None:
    """Read the request body before taking a lock, so a slow client cannot hold the service."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return
    length = environ.get("CONTENT_LENGTH") or ""
    if length.isdigit():
        body = stream.read(int(length)) if int(length) else b""
    elif environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        return
    environ["wsgi.input"] = io.BytesIO(body)


class SerializedApp:
    """WSGI middleware: requests to each service in ``services`` run one at a time, start to finish."""

    def __init__(self, app: WsgiApp, services: Iterable[str]) -> None:
        self._app = app
        self._locks = {service: threading.Lock() for service in services}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        service = signing_service(environ)
        lock = self._locks.get(service) if service is not None else None
        if lock is None:
            return self._app(environ, start_response)
        _buffer_body(environ)
        with lock:
            # werkzeug sends nothing before the first body chunk; the whole response is built here, under
            # the lock, and written to the socket after it is released.
            result = self._app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class LimitedApp:
    """WSGI middleware: DynamoDB requests past AWS's throughput (tools/emulators/dynamodb_limiter.py) are
    answered with AWS's throttling error instead of reaching moto; served reads are charged afterwards."""

    def __init__(self, app: WsgiApp, limits: Any) -> None:
        from tools.emulators.dynamodb_limiter import DynamoDBLimiter

        self._app = app
        self.limiter = DynamoDBLimiter(limits)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET") or ""
        if not target.startswith("DynamoDB_20120810.") or not self.limiter.enabled:
            return self._app(environ, start_response)
        _buffer_body(environ)
        stream = environ["wsgi.input"]
        try:
            request = json.loads(stream.getvalue() or b"{}") if isinstance(stream, io.BytesIO) else None
        except ValueError:
            request = None
        if not isinstance(request, dict):
            return self._app(environ, start_response)
        from tools.emulators import dynamodb_requests

        plan = dynamodb_requests.plan(target.rpartition(".")[2], request, _table_lookup(environ))
        if plan is None:
            return self._app(environ, start_response)
        refusal, request = plan.admit(self.limiter, time.monotonic())
        if refusal is not None:
            start_response(
                "400 Bad Request",
                [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(refusal)))],
            )
            return [refusal]
        if request is not None:  # a batch with some items throttled: the rest go to moto
            body = json.dumps(request).encode()
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"] = status
            return start_response(status, headers, exc_info) if exc_info else start_response(status, headers)

        result = self._app(environ, capture)
        try:
            answer = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        if str(captured.get("status", "")).startswith("200"):
            answer = plan.served(self.limiter, answer, time.monotonic())
        return [answer]


def _table_lookup(environ: dict[str, Any]) -> Callable[[str], Any]:
    """``lookup(table name or ARN) -> TableInfo | None`` from moto's backend for the request's region."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from tools.emulators.dynamodb_limiter import TableInfo

    auth = environ.get("HTTP_AUTHORIZATION") or ""
    start = auth.find("Credential=")
    scope = auth[start + 11 :].split(",", 1)[0].split("/") if start >= 0 else []
    region = scope[2] if len(scope) == 5 else "us-east-1"

    def lookup(name: str) -> TableInfo | None:
        name = name.rsplit(":table/", 1)[-1]
        try:
            table = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].tables.get(name)
        except KeyError:
            return None
        if table is None:
            return None
        throughput = table.throughput or {}
        rcu = float(throughput.get("ReadCapacityUnits") or 0)
        wcu = float(throughput.get("WriteCapacityUnits") or 0)
        on_demand = table.billing_mode == "PAY_PER_REQUEST" or not (rcu or wcu)
        return TableInfo(table.name, table.table_arn, table.hash_key_attr, on_demand, rcu, wcu)

    return lookup


def parse_services(value: str) -> tuple[str, ...]:
    """``dynamodb,s3`` -> ("dynamodb", "s3"); ``none`` or empty -> () (moto as it comes)."""
    names = tuple(part.strip().lower() for part in value.split(",") if part.strip())
    return () if names in {(), ("none",)} else names


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    # Exit at once: moto keeps nothing worth flushing, and a clean interpreter exit could wait for request
    # threads still busy (an unsafe-mode request stuck in a corrupted backend kept the old server up >10 s).
    logging.shutdown()
    os._exit(0)


def one_backup_per_table() -> None:
    """moto's TransactWriteItems backs up a table once per item it writes: a deep copy of the whole table each
    time, so 100 items over two tables cost 100 copies, and a transaction grows with the table times its
    items. Every copy is taken before the first write, so one per table is the same backup. Only with
    DynamoDB serialized: the backend module's ``copy`` is swapped for the call."""
    from moto.dynamodb import models

    real = copy
    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        tables = {id(t): t for t in self.tables.values()}
        copies: dict[int, Any] = {}

        def deepcopy(obj: Any, memo: Any = None) -> Any:
            if id(obj) not in tables:
                return real.deepcopy(obj, memo)
            if id(obj) not in copies:
                copies[id(obj)] = real.deepcopy(obj, memo)
            return copies[id(obj)]

        setattr(models, "copy", SimpleNamespace(deepcopy=deepcopy))  # noqa: B010 - moto's own name for it
        try:
            original(self, transact_items)
        finally:
            setattr(models, "copy", real)  # noqa: B010

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


def serve(port: int, services: tuple[str, ...], limits_json: str | None = None) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    os.environ.setdefault("MOTO_PORT", str(port))
    signal.signal(signal.SIGINT, _exit_on_signal)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    if "dynamodb" in services:
        one_backup_per_table()
    dispatcher = DomainDispatcherApplication(create_backend_app)
    app: Any = SerializedApp(dispatcher, services) if services else dispatcher
    if limits_json:
        from tools.emulators.limits import Limits

        limits = Limits.from_json(limits_json)
        if limits.enabled:
            app = LimitedApp(app, limits)
    logger.info(
        "moto server starting on http://%s:%d; serialized services: %s",
        LOOPBACK,
        port,
        ", ".join(services) or "none (moto's threaded server as it comes)",
    )
    run_simple(LOOPBACK, port, app, threaded=True, request_handler=MotoRequestHandler)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    parser.add_argument("--verbose", action="store_true", help="log every request (werkzeug)")
    parser.add_argument(
        "--serialize",
        default=",".join(DEFAULT_SERIALIZED),
        help="comma-separated signing names of services whose requests run one at a time, or 'none'",
    )
    parser.add_argument(
        "--limits", default=None, help="tools.emulators.limits.Limits as JSON (default: none)"
    )
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if args.parent_pid > 0:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid, 0.5), name="parent-watch", daemon=True
        ).start()
    serve(args.port, parse_services(args.serialize), args.limits)


if __name__ == "__main__":
    main()
