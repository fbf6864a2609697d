"""An in-memory DynamoDB with the boto3 client methods the project calls, billing every request.

Requests and responses are in DynamoDB's wire form, exactly as a boto3 low-level client takes and returns
them, and errors are botocore ``ClientError`` with DynamoDB's codes, so the project's repositories and
``consumer.dynamo.translate_errors`` run on it unchanged. Every request is charged to a ``Ledger`` with the
rules of ``tools.coordination.billing``. Responses share nested values with the stored items (items are
replaced on every write, never changed in place): read them, do not mutate them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from tools.coordination.billing import item_size, page_read_units, read_units, write_units
from tools.coordination.expressions import ExpressionError, Expressions, Item, get_path
from tools.coordination.ledger import Ledger
from tools.coordination.tables import Index, Table

__all__ = ["InMemoryDynamoDB"]

Change = Callable[[Item | None], tuple[Item | None, set[str]]]  # old item -> new item, names written
PAGE_BYTES = 1024 * 1024  # a Query or Scan page stops after reading 1 MB


def _error(op: str, code: str, message: str, **extra: Any) -> ClientError:
    response: dict[str, Any] = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400},
        **extra,
    }
    return ClientError(response, op)


class _Waiter:
    def __init__(self, check: Callable[[str], bool]) -> None:
        self._check = check

    def wait(self, TableName: str, **_: Any) -> None:
        if not self._check(TableName):
            raise RuntimeError(f"waiter: table {TableName} is not in the wanted state")


class InMemoryDynamoDB:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._tables: dict[str, Table] = {}
        self._lock = threading.RLock()

    # -- tables ------------------------------------------------------------------------------------
    def create_table(self, **req: Any) -> dict[str, Any]:
        name = req["TableName"]
        with self._lock:
            if name in self._tables:
                raise _error("CreateTable", "ResourceInUseException", f"Table already exists: {name}")
            keys = {k["KeyType"]: k["AttributeName"] for k in req["KeySchema"]}
            types = {a["AttributeName"]: a["AttributeType"] for a in req.get("AttributeDefinitions", [])}
            table = Table(name, keys["HASH"], keys.get("RANGE"), types)
            for gsi in req.get("GlobalSecondaryIndexes", []):
                ik = {k["KeyType"]: k["AttributeName"] for k in gsi["KeySchema"]}
                proj = gsi.get("Projection", {})
                table.indexes[gsi["IndexName"]] = Index(
                    gsi["IndexName"],
                    ik["HASH"],
                    ik.get("RANGE"),
                    proj.get("ProjectionType", "ALL"),
                    tuple(proj.get("NonKeyAttributes", ())),
                    table.key_names,
                )
            self._tables[name] = table
        return {"TableDescription": self._describe(table)}

    def delete_table(self, TableName: str) -> dict[str, Any]:
        with self._lock:
            table = self._table("DeleteTable", TableName)
            del self._tables[TableName]
        return {"TableDescription": self._describe(table)}

    def list_tables(self, **_: Any) -> dict[str, Any]:
        with self._lock:
            return {"TableNames": sorted(self._tables)}

    def describe_table(self, TableName: str) -> dict[str, Any]:
        with self._lock:
            return {"Table": self._describe(self._table("DescribeTable", TableName))}

    def get_waiter(self, name: str) -> _Waiter:
        if name == "table_exists":
            return _Waiter(lambda t: t in self._tables)
        if name == "table_not_exists":
            return _Waiter(lambda t: t not in self._tables)
        raise ValueError(f"no waiter {name!r}")

    def _describe(self, t: Table) -> dict[str, Any]:
        desc: dict[str, Any] = {
            "TableName": t.name,
            "TableStatus": "ACTIVE",
            "KeySchema": [{"AttributeName": t.hash_key, "KeyType": "HASH"}]
            + ([{"AttributeName": t.range_key, "KeyType": "RANGE"}] if t.range_key else []),
            "ItemCount": len(t.items),
            "BillingModeSummary": {"BillingMode": "PAY_PER_REQUEST"},
        }
        if t.indexes:
            desc["GlobalSecondaryIndexes"] = [
                {"IndexName": i.name, "IndexStatus": "ACTIVE", "Projection": {"ProjectionType": i.projection}}
                for i in t.indexes.values()
            ]
        return desc

    def _table(self, op: str, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise _error(op, "ResourceNotFoundException", "Requested resource not found")
        return table

    # -- helpers -----------------------------------------------------------------------------------
    @staticmethod
    def _exprs(op: str, req: Mapping[str, Any]) -> Expressions:
        return Expressions(req.get("ExpressionAttributeNames"), req.get("ExpressionAttributeValues"))

    def _key(self, op: str, table: Table, key: Mapping[str, Any]) -> Any:
        if set(key) != set(table.key_names):
            raise _error(op, "ValidationException", "The provided key element does not match the schema")
        return table.key(key)

    def _charge_write(
        self, op: str, table: Table, before: Item | None, after: Item | None, *, ok: bool, factor: int = 1
    ) -> None:
        units = write_units(item_size(before), item_size(after) if ok else 0)
        self.ledger.charge(table.name, op, write=factor * units)
        if ok:
            for index in table.indexes.values():
                if n := index.write_units(before, after):
                    self.ledger.charge(f"{table.name}:{index.name}", op, write=n, requests=0)

    @staticmethod
    def _project(item: Item, exprs: Expressions, text: str | None) -> Item:
        paths = exprs.projection(text)
        if paths is None:
            return item  # the stored item itself: replaced on every write, never changed in place
        out: Item = {}
        for path in paths:
            v = get_path(item, path)
            if v is not None:
                out[str(path[0])] = item[str(path[0])] if len(path) == 1 else v
        return out

    @staticmethod
    def _returned(mode: str, old: Item | None, new: Item | None, touched: set[str]) -> Item | None:
        if mode == "ALL_OLD":
            return old
        if mode == "ALL_NEW":
            return new
        if mode == "UPDATED_OLD":
            return {k: v for k, v in (old or {}).items() if k in touched}
        if mode == "UPDATED_NEW":
            return {k: v for k, v in (new or {}).items() if k in touched}
        return None

    # -- single-item requests ----------------------------------------------------------------------
    def get_item(self, **req: Any) -> dict[str, Any]:
        op = "GetItem"
        with self._lock:
            table = self._table(op, req["TableName"])
            try:
                exprs = self._exprs(op, req)
                key = self._key(op, table, req["Key"])
                item = table.get(key)
                out = (
                    {}
                    if item is None
                    else {"Item": self._project(item, exprs, req.get("ProjectionExpression"))}
                )
                exprs.check_all_used()
            except ExpressionError as exc:
                raise _error(op, "ValidationException", str(exc)) from exc
            size = table.sizes.get(key, 0)
            self.ledger.charge(table.name, op, read=read_units(size, bool(req.get("ConsistentRead"))))
            return out

    def put_item(self, **req: Any) -> dict[str, Any]:
        return self._write("PutItem", req, lambda _e: lambda _old: (dict(req["Item"]), set(req["Item"])))

    def delete_item(self, **req: Any) -> dict[str, Any]:
        return self._write("DeleteItem", req, lambda _e: lambda _old: (None, set()))

    def update_item(self, **req: Any) -> dict[str, Any]:
        def prepare(exprs: Expressions) -> Change:
            apply = exprs.update(req.get("UpdateExpression", ""))
            return lambda old: apply(old if old is not None else dict(req["Key"]))

        return self._write("UpdateItem", req, prepare)

    def _write(
        self,
        op: str,
        req: Mapping[str, Any],
        prepare: Callable[[Expressions], Change],
    ) -> dict[str, Any]:
        with self._lock:
            table = self._table(op, req["TableName"])
            key_attrs = req["Item"] if op == "PutItem" else req["Key"]
            if op == "PutItem":
                key_attrs = {k: key_attrs[k] for k in table.key_names if k in key_attrs}
            try:
                key = self._key(op, table, key_attrs)
                exprs = self._exprs(op, req)
                cond = exprs.condition(req.get("ConditionExpression"))
                change = prepare(exprs)
                old = table.get(key)
                ok = cond is None or cond(old or {})
                new, touched = change(old) if ok else (old, set())
                exprs.check_all_used()
                if new is not None and table.key(new) != key:
                    raise ExpressionError("Cannot update attribute: this attribute is part of the key")
            except ExpressionError as exc:
                raise _error(op, "ValidationException", str(exc)) from exc
            self._charge_write(op, table, old, new if ok else old, ok=ok)
            if not ok:
                extra = {}
                if req.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and old is not None:
                    extra["Item"] = dict(old)
                raise _error(op, "ConditionalCheckFailedException", "The conditional request failed", **extra)
            table.put(key, new)
            returned = self._returned(req.get("ReturnValues", "NONE"), old, new, touched)
            return {"Attributes": dict(returned)} if returned else {}

    # -- reads of many items -----------------------------------------------------------------------
    def scan(self, **req: Any) -> dict[str, Any]:
        op = "Scan"
        with self._lock:
            table = self._table(op, req["TableName"])
            try:
                exprs = self._exprs(op, req)
                filt = exprs.condition(req.get("FilterExpression"))
                if req.get("IndexName"):
                    raise ExpressionError("Scan of an index is not supported by the in-memory client")
                start = req.get("ExclusiveStartKey")
                keys = table.scan_from(table.key(start) if start else None)
                page = self._page(
                    table, req, exprs, filt, ((k, table.items[k], table.sizes[k]) for k in keys)
                )
                exprs.check_all_used()
            except ExpressionError as exc:
                raise _error(op, "ValidationException", str(exc)) from exc
            return self._finish_page(op, table.name, req, page, table)

    def query(self, **req: Any) -> dict[str, Any]:
        op = "Query"
        with self._lock:
            table = self._table(op, req["TableName"])
            try:
                exprs = self._exprs(op, req)
                index = table.indexes.get(req["IndexName"]) if req.get("IndexName") else None
                if req.get("IndexName") and index is None:
                    raise ExpressionError(f"The table does not have the specified index: {req['IndexName']}")
                if index is not None and req.get("ConsistentRead"):
                    raise ExpressionError("Consistent reads are not supported on global secondary indexes")
                hash_key = index.hash_key if index else table.hash_key
                key_cond = exprs.condition(req["KeyConditionExpression"])
                filt = exprs.condition(req.get("FilterExpression"))
                hash_value = self._hash_value(req, exprs, hash_key)
                if index is not None:
                    part = index.partitions.get(hash_value, {})
                    rows = [(k, e, item_size(e)) for k, e in part.items()]
                else:
                    rows = [(k, table.items[k], table.sizes[k]) for k in table.order() if k[0] == hash_value]
                assert key_cond is not None
                rows = [r for r in rows if key_cond(r[1])]
                range_key = index.range_key if index else table.range_key
                if range_key:
                    rows.sort(
                        key=lambda r: repr(r[1].get(range_key)), reverse=req.get("ScanIndexForward") is False
                    )
                start = req.get("ExclusiveStartKey")
                if start:
                    base = table.key(start)
                    found = [i for i, r in enumerate(rows) if r[0] == base]
                    rows = rows[found[0] + 1 :] if found else rows
                page = self._page(table, req, exprs, filt, iter(rows))
                exprs.check_all_used()
            except ExpressionError as exc:
                raise _error(op, "ValidationException", str(exc)) from exc
            label = f"{table.name}:{index.name}" if index else table.name
            return self._finish_page(op, label, req, page, table)

    @staticmethod
    def _hash_value(req: Mapping[str, Any], exprs: Expressions, hash_key: str) -> Any:
        """The partition the key condition names (``<hash key> = :value``)."""
        from tools.coordination.expressions import _norm, _tokens

        toks = _tokens(req["KeyConditionExpression"])
        names = req.get("ExpressionAttributeNames") or {}
        values = req.get("ExpressionAttributeValues") or {}
        for i in range(len(toks) - 2):
            name = names.get(toks[i], toks[i])
            if name == hash_key and toks[i + 1] == "=" and toks[i + 2] in values:
                return _norm(values[toks[i + 2]])
        raise ExpressionError("Query condition missed key schema element: " + hash_key)

    def _page(self, table: Table, req: Mapping[str, Any], exprs: Expressions, filt: Any, rows: Any) -> Any:
        limit = req.get("Limit")
        items: list[Item] = []
        sizes: list[int] = []
        last: Any = None
        more = False
        total = 0
        for _key, item, size in rows:
            if (limit is not None and len(sizes) >= limit) or total >= PAGE_BYTES:
                more = True
                break
            sizes.append(size)
            total += size
            last = item
            if filt is None or filt(item):
                items.append(self._project(item, exprs, req.get("ProjectionExpression")))
        return items, sizes, last if more else None

    def _finish_page(
        self, op: str, label: str, req: Mapping[str, Any], page: Any, table: Table
    ) -> dict[str, Any]:
        items, sizes, last = page
        consistent = bool(req.get("ConsistentRead"))
        self.ledger.charge(label, op, read=page_read_units(sizes, consistent))
        out: dict[str, Any] = {"Count": len(items), "ScannedCount": len(sizes)}
        if req.get("Select") != "COUNT":
            out["Items"] = items
        if last is not None:
            lek = table.key_item(last)
            index = table.indexes.get(req.get("IndexName") or "")
            if index is not None:
                lek.update({k: last[k] for k in (index.hash_key, index.range_key) if k})
            out["LastEvaluatedKey"] = lek
        return out

    def batch_get_item(self, **req: Any) -> dict[str, Any]:
        op = "BatchGetItem"
        out: dict[str, list[Item]] = {}
        with self._lock:
            for name, spec in req["RequestItems"].items():
                table = self._table(op, name)
                exprs = Expressions(spec.get("ExpressionAttributeNames"), None)
                found = out.setdefault(name, [])
                for key_attrs in spec["Keys"]:
                    key = self._key(op, table, key_attrs)
                    item = table.get(key)
                    if item is not None:
                        found.append(self._project(item, exprs, spec.get("ProjectionExpression")))
                    units = read_units(table.sizes.get(key, 0), bool(spec.get("ConsistentRead")))
                    self.ledger.charge(name, op, read=units, requests=0)
            self.ledger.charge("", op, requests=1)  # one request, its units charged per table above
        return {"Responses": out, "UnprocessedKeys": {}}

    # -- transactions ------------------------------------------------------------------------------
    def transact_write_items(self, **req: Any) -> dict[str, Any]:
        op = "TransactWriteItems"
        with self._lock:
            plans: list[tuple[Table, Any, Item | None, Item | None, bool, str]] = []
            seen: set[tuple[str, Any]] = set()
            try:
                for entry in req["TransactItems"]:
                    ((kind, spec),) = entry.items()
                    table = self._table(op, spec["TableName"])
                    key_attrs = spec["Item"] if kind == "Put" else spec["Key"]
                    key = self._key(op, table, {k: key_attrs[k] for k in table.key_names if k in key_attrs})
                    if (table.name, key) in seen:
                        raise ExpressionError(
                            "Transaction request cannot include multiple operations on one item"
                        )
                    seen.add((table.name, key))
                    exprs = self._exprs(op, spec)
                    cond = exprs.condition(spec.get("ConditionExpression"))
                    update = exprs.update(spec["UpdateExpression"]) if kind == "Update" else None
                    if kind not in ("Put", "Delete", "Update", "ConditionCheck"):
                        raise ExpressionError(f"unknown transaction item {kind}")
                    exprs.check_all_used()
                    old = table.get(key)
                    ok = cond is None or cond(old or {})
                    new: Item | None = old
                    if ok and kind == "Put":
                        new = dict(spec["Item"])
                    elif ok and kind == "Delete":
                        new = None
                    elif ok and update is not None:
                        new = update(old if old is not None else dict(spec["Key"]))[0]
                    if kind == "ConditionCheck" and cond is None:
                        raise ExpressionError("ConditionCheck requires a ConditionExpression")
                    want_old = spec.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
                    plans.append((table, key, old, new, ok, "ALL_OLD" if want_old else ""))
            except ExpressionError as exc:
                raise _error(op, "ValidationException", str(exc)) from exc
            committed = all(p[4] for p in plans)
            for table, _key, old, new, _ok, _r in plans:  # cancelled or not, every item is billed twice
                self._charge_write(op, table, old, new if committed else old, ok=committed, factor=2)
            if not committed:
                reasons: list[dict[str, Any]] = []
                for _t, _k, old, _n, ok, ret in plans:
                    reason: dict[str, Any] = {"Code": "None"}
                    if not ok:
                        reason = {
                            "Code": "ConditionalCheckFailed",
                            "Message": "The conditional request failed",
                        }
                        if ret and old is not None:
                            reason["Item"] = dict(old)
                    reasons.append(reason)
                codes = ", ".join(r["Code"] for r in reasons)
                raise _error(
                    op,
                    "TransactionCanceledException",
                    f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                    CancellationReasons=reasons,
                )
            for table, key, _old, new, _ok, _r in plans:
                if new is not _old:
                    table.put(key, new)
            return {}
