"""A counting proxy for real runs: forwards every request to moto unchanged and bills DynamoDB's exactly.

Listens on 127.0.0.1 (a free port), forwards each HTTP request byte for byte to the upstream endpoint and
relays the response. DynamoDB requests (``X-Amz-Target: DynamoDB_20120810.<Operation>``) are parsed and
charged to a ``Ledger`` with ``tools.coordination.billing``: reads by the items the response returns (a
missing item at the minimum); writes by the sizes of the item before and after, read from upstream around
the forwarded write, uncounted, under one lock so no other write lands in between. Limits: a Scan or Query
with a FilterExpression is billed by the items returned (the proxy cannot see those filtered out), and a
read with a ProjectionExpression by the projected attributes; the project uses neither.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tools.coordination.billing import item_size, page_read_units, read_units, write_units
from tools.coordination.ledger import Ledger

__all__ = ["CountingProxy"]

logger = logging.getLogger(__name__)

_TARGET = "DynamoDB_20120810."
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


class CountingProxy:
    def __init__(self, upstream: str, ledger: Ledger, raw_client: Any) -> None:
        """``raw_client``: a boto3 DynamoDB client straight to ``upstream`` (its reads are not counted)."""
        parts = urlsplit(upstream)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self.ledger = ledger
        self._raw = raw_client
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self.errors: list[str] = []
        self._schemas: dict[str, list[str]] = {}  # table -> key attribute names
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                proxy._handle(self)

            def do_GET(self) -> None:
                proxy._handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> CountingProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- forwarding --------------------------------------------------------------------------------
    def _upstream(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
            self._local.conn = conn
        return conn

    def _forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[Any], bytes]:
        for attempt in (1, 2):
            conn = self._upstream()
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.getheaders(), resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        target = h.headers.get("X-Amz-Target") or ""
        op = target[len(_TARGET) :] if target.startswith(_TARGET) else ""
        try:
            if op in _WRITES:
                with self._write_lock:
                    req = json.loads(body)
                    before = self._items(op, req)
                    status, out_headers, data = self._forward(h.command, h.path, headers, body)
                    after = self._items(op, req)
                self._bill_write(op, req, status, data, before, after)
            else:
                status, out_headers, data = self._forward(h.command, h.path, headers, body)
                if op and status == 200:
                    self._bill_read(op, json.loads(body), json.loads(data or b"{}"))
        except Exception as exc:  # upstream gone: tell the client the way a dead server would
            self.errors.append(repr(exc))
            h.send_error(502, "upstream failed")
            return
        h.send_response(status)
        for k, v in out_headers:
            if k.lower() not in _HOP and k.lower() != "content-length":
                h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    # -- billing -----------------------------------------------------------------------------------
    def _key_items(self, op: str, req: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
        """(table, key, kind) of every item a write touches."""
        if op == "TransactWriteItems":
            out = []
            for entry in req["TransactItems"]:
                ((kind, spec),) = entry.items()
                out.append(
                    (spec["TableName"], self._key(spec["TableName"], spec.get("Key") or spec["Item"]), kind)
                )
            return out
        return [(req["TableName"], self._key(req["TableName"], req.get("Key") or req["Item"]), op)]

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        names = self._key_names(table)
        return {k: item[k] for k in names if k in item}

    def _key_names(self, table: str) -> list[str]:
        cache = self._schemas
        if table not in cache:
            desc = self._raw.describe_table(TableName=table)["Table"]
            cache[table] = [k["AttributeName"] for k in desc["KeySchema"]]
        names: list[str] = cache[table]
        return names

    def _items(self, op: str, req: dict[str, Any]) -> list[int]:
        sizes = []
        for table, key, _kind in self._key_items(op, req):
            out = self._raw_get(table, key)
            sizes.append(item_size(out))
        return sizes

    def _raw_get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        # The wire form of the key, through the raw client's serializer: B values are base64 text here.
        from base64 import b64decode

        def plain(v: dict[str, Any]) -> dict[str, Any]:
            return {"B": b64decode(v["B"])} if "B" in v else v

        item = self._raw.get_item(
            TableName=table, Key={k: plain(v) for k, v in key.items()}, ConsistentRead=True
        )
        found: dict[str, Any] | None = item.get("Item")
        return found

    def _bill_write(
        self, op: str, req: dict[str, Any], status: int, data: bytes, before: list[int], after: list[int]
    ) -> None:
        if status != 200:  # only a write refused by its condition consumed units; a malformed one did not
            kind = str(json.loads(data or b"{}").get("__type", ""))
            if not kind.endswith(("ConditionalCheckFailedException", "TransactionCanceledException")):
                return
        factor = 2 if op == "TransactWriteItems" else 1
        for (table, _key, _kind), b, a in zip(self._key_items(op, req), before, after, strict=True):
            self.ledger.charge(table, op, write=factor * write_units(b, a))

    def _bill_read(self, op: str, req: dict[str, Any], resp: dict[str, Any]) -> None:
        consistent = bool(req.get("ConsistentRead"))
        if op == "GetItem":
            self.ledger.charge(req["TableName"], op, read=read_units(item_size(resp.get("Item")), consistent))
        elif op in ("Scan", "Query"):
            label = req["TableName"] + (f":{req['IndexName']}" if req.get("IndexName") else "")
            sizes = [item_size(i) for i in resp.get("Items", [])]
            self.ledger.charge(label, op, read=page_read_units(sizes, consistent))
        elif op == "BatchGetItem":
            for table, spec in req["RequestItems"].items():
                found = {
                    json.dumps(self._key(table, i), sort_keys=True): i
                    for i in resp["Responses"].get(table, [])
                }
                for key in spec["Keys"]:
                    size = item_size(found.get(json.dumps(key, sort_keys=True)))
                    self.ledger.charge(table, op, read=read_units(size, bool(spec.get("ConsistentRead"))))
