"""Bills every DynamoDB request of real runs exactly: a :class:`tools.tcp_proxy.Meter` for the fault proxy,
which forwards the requests to moto unchanged::

    meter = DynamoDBMeter(ledger, raw_client)
    with FaultProxy(("127.0.0.1", moto_port), meter=meter) as proxy:
        ...  # clients at proxy.url(); meter.errors lists what could not be billed

DynamoDB requests (``X-Amz-Target: DynamoDB_20120810.<Operation>``) are charged to a ``Ledger`` with
``tools.coordination.billing``: reads by the items the response returns (a missing item at the minimum);
writes by the sizes of the item before and after, read from moto around the forwarded write through
``raw_client`` (uncounted), under one lock so that no other metered write lands in between. Limits: a Scan or
Query with a FilterExpression is billed by the items returned (the meter cannot see those filtered out), and a
read with a ProjectionExpression by the projected attributes; the project uses neither.
"""

from __future__ import annotations

import json
import threading
from base64 import b64decode
from dataclasses import dataclass, field
from typing import Any

from tools.coordination.billing import item_size, page_read_units, read_units, write_units
from tools.coordination.ledger import Ledger
from tools.http_framing import http_message

__all__ = ["DynamoDBMeter"]

_TARGET = "DynamoDB_20120810."
_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}


@dataclass
class _Write:
    op: str
    request: dict[str, Any]
    before: list[int]


@dataclass
class DynamoDBMeter:
    """Charges ``ledger`` for every DynamoDB request it sees; ``raw_client`` is a boto3 DynamoDB client straight
    to moto (its reads are not counted)."""

    ledger: Ledger
    raw_client: Any
    errors: list[str] = field(default_factory=list)
    _write_lock: threading.Lock = field(default_factory=threading.Lock)
    _schemas: dict[str, list[str]] = field(default_factory=dict)  # table -> key attribute names

    def begin(self, request: bytes) -> object:
        """A write takes the lock (until :meth:`end`) and notes the sizes of the items it touches."""
        _, headers, body = http_message(request)
        target = headers.get("x-amz-target", "")
        op = target[len(_TARGET) :] if target.startswith(_TARGET) else ""
        if op not in _WRITES:
            return (op, body)
        self._write_lock.acquire()
        try:
            req = json.loads(body)
            return _Write(op, req, self._items(op, req))
        except Exception as exc:  # unbillable: noted, and the write goes on unmetered
            self._write_lock.release()
            self.errors.append(repr(exc))
            return None

    def end(self, token: object, response: bytes | None) -> None:
        try:
            if isinstance(token, _Write):
                try:
                    after = self._items(token.op, token.request)
                finally:
                    self._write_lock.release()
                if response is not None:
                    status, body = self._status(response)
                    self._bill_write(token.op, token.request, status, body, token.before, after)
            elif isinstance(token, tuple) and token[0] and response is not None:
                op, request = token
                status, body = self._status(response)
                if status == 200:
                    self._bill_read(op, json.loads(request), json.loads(body or b"{}"))
        except Exception as exc:  # unbillable: noted, the response goes on to the client unchanged
            self.errors.append(repr(exc))

    @staticmethod
    def _status(response: bytes) -> tuple[int, bytes]:
        start, _, body = http_message(response)
        return int(start.split(" ", 2)[1]), body

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
            desc = self.raw_client.describe_table(TableName=table)["Table"]
            cache[table] = [k["AttributeName"] for k in desc["KeySchema"]]
        names: list[str] = cache[table]
        return names

    def _items(self, op: str, req: dict[str, Any]) -> list[int]:
        return [item_size(self._raw_get(table, key)) for table, key, _kind in self._key_items(op, req)]

    def _raw_get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        # The wire form of the key, through the raw client's serializer: B values are base64 text here.
        def plain(v: dict[str, Any]) -> dict[str, Any]:
            return {"B": b64decode(v["B"])} if "B" in v else v

        item = self.raw_client.get_item(
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
        touched = zip(self._key_items(op, req), before, after, strict=True)
        for i, ((table, _key, _kind), b, a) in enumerate(touched):  # one request, on its first item
            self.ledger.charge(table, op, write=factor * write_units(b, a), requests=int(i == 0))

    def _bill_read(self, op: str, req: dict[str, Any], resp: dict[str, Any]) -> None:
        consistent = bool(req.get("ConsistentRead"))
        if op == "GetItem":
            self.ledger.charge(req["TableName"], op, read=read_units(item_size(resp.get("Item")), consistent))
        elif op in ("Scan", "Query"):
            label = req["TableName"] + (f":{req['IndexName']}" if req.get("IndexName") else "")
            sizes = [item_size(i) for i in resp.get("Items", [])]
            self.ledger.charge(label, op, read=page_read_units(sizes, consistent))
        elif op == "BatchGetItem":
            first = 1  # one request, on its first item
            for table, spec in req["RequestItems"].items():
                found = {
                    json.dumps(self._key(table, i), sort_keys=True): i
                    for i in resp["Responses"].get(table, [])
                }
                for key in spec["Keys"]:
                    size = item_size(found.get(json.dumps(key, sort_keys=True)))
                    units = read_units(size, bool(spec.get("ConsistentRead")))
                    self.ledger.charge(table, op, read=units, requests=first)
                    first = 0
