"""The moto server child of :mod:`tools.emulators` (docs/emulators.md), on 127.0.0.1, ending with its parent.

moto's threaded server takes no locks, so concurrent requests interleave (a failing TransactWriteItems restores
the tables as they were when it began, over other requests' writes): :class:`SerializedApp` runs each request
to a serialized service alone. :class:`LimitedApp` answers DynamoDB requests past AWS's throughput with AWS's
throttling errors. :func:`keep_alive` keeps connections open between requests, which werkzeug does not.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import Any

from tools.emulators.children import child_main
from tools.emulators.dynamodb_limiter import DynamoDBLimiter, TableInfo, plan
from tools.emulators.limits import Limits
from tools.emulators.settings import LOOPBACK, REGION, credential_scope, region_of

logger = logging.getLogger(__name__)

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def signing_service(environ: dict[str, Any]) -> str | None:
    """The service a SigV4-signed request is for, e.g. ``dynamodb`` (also DynamoDB Streams', whose backend reads
    the tables: it shares their lock); None if unsigned."""
    scope = credential_scope(environ.get("HTTP_AUTHORIZATION") or "")
    return scope[3].lower() if scope else None


def _drain(result: Iterable[bytes]) -> bytes:
    """The whole body of a WSGI result, closing it."""
    try:
        return b"".join(result)
    finally:
        if (close := getattr(result, "close", None)) is not None:
            close()


class SerializedApp:
    """WSGI middleware: requests to each service in ``services`` run one at a time, start to finish."""

    def __init__(self, app: WsgiApp, services: Iterable[str]) -> None:
        self._app = app
        self._locks = {service: threading.Lock() for service in services}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        lock = self._locks.get(signing_service(environ) or "")
        if lock is None:
            return self._app(environ, start_response)
        with lock:  # the body is read already (keep_alive): a slow client cannot hold the service
            # the whole response is built under the lock and written to the socket after it is released
            return [_drain(self._app(environ, start_response))]


class LimitedApp:
    """WSGI middleware: DynamoDB requests past AWS's throughput (:mod:`tools.emulators.dynamodb_limiter`)
    are answered with AWS's throttling error instead of reaching moto; served reads are charged afterwards."""

    def __init__(self, app: WsgiApp, limits: Limits) -> None:
        self._app = app
        self.limiter = DynamoDBLimiter(limits)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET") or ""
        if not target.startswith("DynamoDB_20120810."):
            return self._app(environ, start_response)
        try:
            request = json.loads(environ["wsgi.input"].getvalue() or b"{}")
        except (ValueError, AttributeError):
            request = None
        cost = (
            plan(target.rpartition(".")[2], request, _table_lookup(environ))
            if isinstance(request, dict)
            else None
        )
        if cost is None:
            return self._app(environ, start_response)
        refusal, reduced = cost.admit(self.limiter, time.monotonic())
        if refusal is not None:
            headers = [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(refusal)))]
            start_response("400 Bad Request", headers)
            return [refusal]
        if reduced is not None:  # a batch with some items throttled: the rest go to moto
            body = json.dumps(reduced).encode()
            environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
        answer = _drain(self._app(environ, start_response))
        return [cost.served(self.limiter, answer, time.monotonic())]


def _table_lookup(environ: dict[str, Any]) -> Callable[[str], TableInfo | None]:
    """``lookup(table name or ARN) -> TableInfo | None`` from moto's backend for the request's region."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    region = region_of(environ.get("HTTP_AUTHORIZATION") or "") or REGION

    def lookup(name: str) -> TableInfo | None:
        try:
            table = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].tables.get(name.rsplit(":table/", 1)[-1])
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


def one_backup_per_table() -> None:
    """moto's TransactWriteItems backs up a table once per item it writes: a deep copy of the whole table each
    time, so 100 items over two tables cost 100 copies, and a transaction grows with the table times its
    items. Every copy is taken before the first write, so one per table is the same backup. Only with
    DynamoDB serialized: the backend module's ``copy`` is swapped for the call."""
    from moto.dynamodb import models

    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        tables = {id(t) for t in self.tables.values()}
        copies: dict[int, Any] = {}

        def deepcopy(obj: Any, memo: Any = None) -> Any:
            if id(obj) not in tables:
                return copy.deepcopy(obj, memo)
            if id(obj) not in copies:
                copies[id(obj)] = copy.deepcopy(obj, memo)
            return copies[id(obj)]

        setattr(models, "copy", SimpleNamespace(deepcopy=deepcopy))  # noqa: B010 - moto's own name for it
        try:
            original(self, transact_items)
        finally:
            setattr(models, "copy", copy)  # noqa: B010

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]


_SCALAR = {"S": str, "N": str, "BOOL": bool, "NULL": bool}
# The members of DynamoDB's (and DynamoDB Streams') AttributeValue.
_MEMBERS = frozenset({*_SCALAR, "B", "SS", "NS", "BS", "M", "L"})


def plain_attribute(value: Any) -> bool:
    """A DynamoDB AttributeValue that moto's response serializer copies unchanged: one member of the expected
    type, with no binary anywhere in it (moto base64-encodes ``B`` and ``BS`` as it serializes them)."""
    if type(value) is not dict or len(value) != 1:
        return False
    [(kind, inner)] = value.items()
    if kind in _SCALAR:
        return type(inner) is _SCALAR[kind]
    if kind in ("SS", "NS"):
        return type(inner) is list and all(type(x) is str for x in inner)
    if kind == "M":
        # moto writes a member under an empty name into the map itself: left to it, to answer as it does
        return type(inner) is dict and all(
            type(k) is str and k and plain_attribute(v) for k, v in inner.items()
        )
    return kind == "L" and type(inner) is list and all(plain_attribute(v) for v in inner)


def copy_plain_attributes(original: Callable[..., None]) -> Callable[..., None]:
    """moto's JSON serializer of structures, but an AttributeValue that it would copy unchanged is copied at
    once: moto otherwise looks each of its ten possible members up through six alias rules, which was over
    half of its CPU for a Scan (``tests/unit/test_emulator_moto.py`` holds the two to the same output)."""

    def serialize(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if (
            key
            and shape.name == "AttributeValue"
            and shape.members.keys() == _MEMBERS
            and plain_attribute(value)
        ):
            self._default_serialize(serialized, value, shape, key)
        else:
            original(self, serialized, value, shape, key)

    return serialize


def lean_server() -> None:
    """Take two costs that no answer needs out of moto's server: its lookup of the service behind a request
    listed moto's package directory each time (the list is fixed once moto is installed), and DynamoDB's
    items go through :func:`copy_plain_attributes`. (Buffering the request handler's writes, to send headers
    and body in one, held back the interim ``100 Continue`` that botocore waits up to a second for before an
    S3 upload's body.)"""
    from moto import backends
    from moto.core.serialize import BaseJSONSerializer

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    structure = copy_plain_attributes(BaseJSONSerializer._serialize_type_structure)
    BaseJSONSerializer._serialize_type_structure = structure  # type: ignore[method-assign]


def keep_alive(handler: type[Any]) -> type[Any]:
    """werkzeug's request ``handler`` (or moto's subclass) answering on kept-alive connections, where werkzeug
    closes each after one answer (docs/emulators.md). Every request body is read whole before the app sees it
    (as a ``BytesIO``), and every answer goes out with a ``Content-Length``; a chunked request closes its
    connection after the answer."""
    from werkzeug.serving import DechunkedInput

    class KeepAlive(handler):  # type: ignore[misc]
        protocol_version = "HTTP/1.1"
        timeout = 30
        disable_nagle_algorithm = True  # headers and body are two writes: no wait for the client's ACK

        def run_wsgi(self) -> None:
            length = self.headers.get("Content-Length", "0")
            chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
            if chunked or not length.isdigit():  # where its body ends is not known
                self.close_connection = True
            if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            environ = self.make_environ()
            if chunked:
                body = DechunkedInput(self.rfile).read()
            else:
                body = self.rfile.read(int(length)) if length.isdigit() else b""
            environ.update({"wsgi.input": io.BytesIO(body), "CONTENT_LENGTH": str(len(body))})
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            environ.pop("wsgi.input_terminated", None)
            answer: list[Any] = []

            def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                answer[:] = [status, headers]
                return answer.append

            try:
                drained = _drain(self.server.app(environ, start_response))
                status, headers, *written = answer
                body = b"".join([*written, drained])
            except Exception:
                logger.exception("moto failed on %s %s", self.command, self.path)
                self.close_connection = True
                status, headers, body = "500 Internal Server Error", [], b""
            code, _, reason = status.partition(" ")
            self.send_response(number := int(code), reason)
            for name, value in headers:
                self.send_header(name, value)
            bodiless = self.command == "HEAD" or number in (204, 304) or number < 200
            if not bodiless and not any(name.lower() == "content-length" for name, _ in headers):
                self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if not bodiless:
                self.wfile.write(body)

        def log_error(self, format: str, *args: Any) -> None:
            if not format.startswith("Request timed out"):  # an idle connection closed: nothing went wrong
                super().log_error(format, *args)

    return KeepAlive


def main(argv: list[str] | None = None) -> None:
    """Serve moto on 127.0.0.1 until SIGTERM or the parent's death."""
    args = child_main(argv, __doc__, serialize=str)  # services whose requests run one at a time, or none
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    os.environ.setdefault("MOTO_PORT", str(args.port))  # the port in the URLs moto answers with
    services = parse_services(args.serialize)
    if "dynamodb" in services:
        one_backup_per_table()
    app: Any = DomainDispatcherApplication(create_backend_app)
    app = SerializedApp(app, services) if services else app
    limits = Limits(**json.loads(args.limits))
    app = LimitedApp(app, limits) if limits.enabled else app
    logger.info(
        "moto server on http://%s:%d; serialized: %s", LOOPBACK, args.port, ", ".join(services) or "none"
    )
    lean_server()
    run_simple(LOOPBACK, args.port, app, threaded=True, request_handler=keep_alive(MotoRequestHandler))


if __name__ == "__main__":
    main()
