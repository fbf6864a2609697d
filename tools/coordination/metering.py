"""Bills every DynamoDB request of a real run: a :class:`tools.tcp_proxy.Meter` for the fault proxy, which
forwards the requests to moto unchanged. Reads are billed by the items the response returns; writes by the
sizes of the items before and after, read from moto around the write (uncounted) under one lock so that no
other metered write lands in between. A filter or projection (the project uses neither) would not be seen."""

from __future__ import annotations

import json
import threading
from base64 import b64decode
from dataclasses import dataclass, field
from typing import Any

from tools.coordination.billing import Ledger, item_size, page_read_units, read_units
from tools.http_framing import http_message

__all__ = ["DynamoDBMeter"]

_TARGET = "DynamoDB_20120810."
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}
_REFUSED = ("ConditionalCheckFailedException", "TransactionCanceledException")  # they consumed units


@dataclass
class _Request:
    op: str
    body: dict[str, Any]
    before: list[int] | None = None  # a write's item sizes


@dataclass
class DynamoDBMeter:
    """Charges ``ledger`` for every DynamoDB request it sees; ``raw_client`` is a boto3 DynamoDB client straight
    to moto (its reads are not counted); ``errors`` lists what could not be billed."""

    ledger: Ledger
    raw_client: Any
    errors: list[str] = field(default_factory=list)
    _write_lock: threading.Lock = field(default_factory=threading.Lock)
    _schemas: dict[str, list[str]] = field(default_factory=dict)  # table -> key attribute names

    def begin(self, request: bytes) -> object:
        """A write takes the lock (until :meth:`end`) and notes the sizes of the items it touches."""
        _, headers, body = http_message(request)
        target = headers.get("x-amz-target", "")
        if not target.startswith(_TARGET):
            return None
        op = target.removeprefix(_TARGET)
        write = op in _WRITES
        if write:
            self._write_lock.acquire()
        try:
            req = _Request(op, json.loads(body))
            req.before = self._sizes(req) if write else None
            return req
        except Exception as exc:  # unbillable: noted, and the request goes on unmetered
            if write:
                self._write_lock.release()
            self.errors.append(repr(exc))
            return None

    def end(self, token: object, response: bytes | None) -> None:
        """Bills the request of ``token`` by its ``response`` (a write releases the lock)."""
        if not isinstance(token, _Request):
            return
        try:
            if token.before is not None:
                try:
                    after = self._sizes(token)
                finally:
                    self._write_lock.release()
                if response is not None:
                    self._bill_write(token, token.before, after, *_status(response))
            elif response is not None and _status(response)[0] == 200:
                self._bill_read(token, json.loads(_status(response)[1]))
        except Exception as exc:  # unbillable: noted, the response goes on to the client unchanged
            self.errors.append(repr(exc))

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        if table not in self._schemas:
            desc = self.raw_client.describe_table(TableName=table)["Table"]
            self._schemas[table] = [k["AttributeName"] for k in desc["KeySchema"]]
        return {k: item[k] for k in self._schemas[table] if k in item}

    def _touched(self, req: _Request) -> list[tuple[str, dict[str, Any]]]:
        """(table, key) of every item a write touches."""
        body = req.body
        specs = [next(iter(e.values())) for e in body["TransactItems"]] if "TransactItems" in body else [body]
        return [(s["TableName"], self._key(s["TableName"], s.get("Key") or s["Item"])) for s in specs]

    def _sizes(self, req: _Request) -> list[int]:
        # The key in the raw client's input form: B values arrive as base64 text on the wire.
        def plain(v: dict[str, Any]) -> dict[str, Any]:
            return {"B": b64decode(v["B"])} if "B" in v else v

        sizes = []
        for table, key in self._touched(req):
            got = self.raw_client.get_item(
                TableName=table, Key={k: plain(v) for k, v in key.items()}, ConsistentRead=True
            )
            sizes.append(item_size(got.get("Item")))
        return sizes

    def _bill_write(
        self, req: _Request, before: list[int], after: list[int], status: int, data: bytes
    ) -> None:
        if status != 200 and not str(json.loads(data or b"{}").get("__type", "")).endswith(_REFUSED):
            return  # a malformed write consumed nothing
        touched = zip(self._touched(req), before, after, strict=True)
        self.ledger.charge_write(req.op, [(table, b, a) for (table, _key), b, a in touched])

    def _bill_read(self, req: _Request, resp: dict[str, Any]) -> None:
        body, op = req.body, req.op
        consistent = bool(body.get("ConsistentRead"))
        if op == "GetItem":
            self.ledger.charge(
                body["TableName"], op, read=read_units(item_size(resp.get("Item")), consistent)
            )
        elif op in ("Scan", "Query"):
            sizes = [item_size(i) for i in resp.get("Items", [])]
            self.ledger.charge(body["TableName"], op, read=page_read_units(sizes, consistent))
        elif op == "BatchGetItem":  # each item rounded alone, a missing one at the minimum; one request
            first = 1
            for table, spec in body["RequestItems"].items():
                found = [item_size(i) for i in resp["Responses"].get(table, [])]
                for size in found + [0] * (len(spec["Keys"]) - len(found)):
                    units = read_units(size, bool(spec.get("ConsistentRead")))
                    self.ledger.charge(table, op, read=units, requests=first)
                    first = 0


def _status(response: bytes) -> tuple[int, bytes]:
    start, _, body = http_message(response)
    return int(start.split(" ", 2)[1]), body
