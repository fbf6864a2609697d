"""What a DynamoDB request costs, and what to answer when the limiter refuses some or all of it.

:func:`plan` reads a JSON 1.0 request (operation name and body) and returns a :class:`Plan`: the writes it
makes (sized from the request) and the reads it makes (charged from the response). ``Plan.admit`` asks the
:class:`~tools.emulators.dynamodb_limiter.DynamoDBLimiter` and gives either the error body to send or,
for a batch of which only some items were throttled, the request to send on (the rest come back as
``UnprocessedItems`` / ``UnprocessedKeys``, as on AWS; a batch entirely throttled is an error).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.emulators.dynamodb_limiter import (
    DynamoDBLimiter,
    TableInfo,
    Throttle,
    json_size,
    partition_of,
    read_units,
    transaction_cancelled,
    write_units,
)

logger = logging.getLogger(__name__)

Lookup = Callable[[str], TableInfo | None]


@dataclass
class Plan:
    """The capacity one request needs."""

    operation: str
    request: dict[str, Any]
    writes: list[tuple[TableInfo, str | None, float]] = field(default_factory=list)
    reads: list[tuple[TableInfo, str | None]] = field(default_factory=list)
    consistent: bool = False
    #: for batches: (table name, index in its list) of each write/read, to rebuild the request
    slots: list[tuple[str, int]] = field(default_factory=list)
    #: throttled batch entries by table, returned as UnprocessedItems / UnprocessedKeys
    unprocessed: dict[str, list[Any]] = field(default_factory=dict)

    def admit(self, limiter: DynamoDBLimiter, now: float) -> tuple[bytes | None, dict[str, Any] | None]:
        """(error body, None) to refuse; (None, new request) to send a reduced batch; (None, None) to pass."""
        batch = self.operation in ("BatchWriteItem", "BatchGetItem")
        if self.writes:
            if batch:
                verdicts = [limiter.take_writes([w], now)[0] for w in self.writes]
            else:
                verdicts = limiter.take_writes(self.writes, now)
        else:
            verdicts = limiter.admit_reads(self.reads, now)
        refused = [v for v in verdicts if v is not None]
        if not refused:
            return None, None
        if self.operation.startswith("Transact"):
            return transaction_cancelled(verdicts), None
        if not batch or len(refused) == len(verdicts):
            return refused[0].body(), None
        return None, self._reduced(verdicts)

    def _reduced(self, verdicts: list[Throttle | None]) -> dict[str, Any]:
        items = self.request["RequestItems"]
        keep: dict[str, list[Any]] = {}
        later: dict[str, list[Any]] = {}
        for (table, index), verdict in zip(self.slots, verdicts, strict=True):
            entry = items[table][index] if self.operation == "BatchWriteItem" else items[table]["Keys"][index]
            (later if verdict is not None else keep).setdefault(table, []).append(entry)
        self.unprocessed = later
        if self.operation == "BatchWriteItem":
            return {**self.request, "RequestItems": keep}
        return {
            **self.request,
            "RequestItems": {t: {**items[t], "Keys": keys} for t, keys in keep.items()},
        }

    def served(self, limiter: DynamoDBLimiter, answer: bytes, now: float) -> bytes:
        """Charge the reads of a served request; add throttled batch items to its Unprocessed* field."""
        later = self.unprocessed
        if not self.reads and not later:
            return answer
        try:
            parsed = json.loads(answer)
        except ValueError:
            return answer
        if self.reads:
            limiter.charge_reads(self._read_costs(parsed), now)
        if later:
            if self.operation == "BatchWriteItem":
                unprocessed = parsed.setdefault("UnprocessedItems", {})
                for table, entries in later.items():
                    unprocessed.setdefault(table, []).extend(entries)
            else:
                unprocessed = parsed.setdefault("UnprocessedKeys", {})
                items = self.request["RequestItems"]
                for table, keys in later.items():
                    slot = unprocessed.setdefault(table, {**items[table], "Keys": []})
                    slot["Keys"].extend(keys)
            return json.dumps(parsed).encode()
        return answer

    def _read_costs(self, parsed: dict[str, Any]) -> list[tuple[TableInfo, str | None, float]]:
        op, consistent = self.operation, self.consistent
        if op == "GetItem":
            table, part = self.reads[0]
            return [(table, part, read_units(json_size(parsed.get("Item", {})), consistent))]
        if op in ("Query", "Scan"):
            table, _ = self.reads[0]
            items = parsed.get("Items", [])
            size = sum(json_size(item) for item in items)
            part = (
                partition_of(table, items[0])
                if op == "Query" and items and "IndexName" not in self.request
                else None
            )
            return [(table, part, read_units(size, consistent))]
        if op == "TransactGetItems":
            responses = parsed.get("Responses", [])
            return [
                (table, part, read_units(json_size(r.get("Item", {})), True, transactional=True))
                for (table, part), r in zip(self.reads, responses, strict=False)
            ]
        if op == "BatchGetItem":
            costs = []
            by_name = {table.name: table for table, _ in self.reads}
            for name, items in parsed.get("Responses", {}).items():
                found = by_name.get(name.rsplit(":table/", 1)[-1])
                if found is not None:
                    strong = bool(self.request["RequestItems"].get(name, {}).get("ConsistentRead"))
                    costs += [
                        (found, partition_of(found, it), read_units(json_size(it), strong)) for it in items
                    ]
            return costs
        return []


def plan(operation: str, request: dict[str, Any], lookup: Lookup) -> Plan | None:
    """The capacity ``request`` needs, or None for an operation without throughput (control plane, or a
    table that does not exist: moto answers that itself)."""
    p = Plan(operation, request, consistent=bool(request.get("ConsistentRead")))
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        table = lookup(str(request.get("TableName", "")))
        if table is None:
            return None
        item = request.get("Item") if operation == "PutItem" else request.get("Key")
        size = json_size(item) + json_size(request.get("ExpressionAttributeValues", {}))
        p.writes.append((table, partition_of(table, item), write_units(size)))
    elif operation == "TransactWriteItems":
        for entry in request.get("TransactItems", []):
            kind, body = next(iter(entry.items()))
            table = lookup(str(body.get("TableName", "")))
            if table is None:
                return None
            item = body.get("Item") if kind == "Put" else body.get("Key")
            size = json_size(item) + json_size(body.get("ExpressionAttributeValues", {}))
            p.writes.append((table, partition_of(table, item), write_units(size, transactional=True)))
    elif operation == "BatchWriteItem":
        for name, entries in request.get("RequestItems", {}).items():
            table = lookup(name)
            if table is None:
                return None
            for index, entry in enumerate(entries):
                body = entry.get("PutRequest", {}).get("Item") or entry.get("DeleteRequest", {}).get("Key")
                p.writes.append((table, partition_of(table, body), write_units(json_size(body))))
                p.slots.append((name, index))
    elif operation in ("GetItem", "Query", "Scan"):
        table = lookup(str(request.get("TableName", "")))
        if table is None:
            return None
        p.reads.append((table, partition_of(table, request.get("Key")) if operation == "GetItem" else None))
    elif operation == "TransactGetItems":
        for entry in request.get("TransactItems", []):
            body = entry.get("Get", {})
            table = lookup(str(body.get("TableName", "")))
            if table is None:
                return None
            p.reads.append((table, partition_of(table, body.get("Key"))))
    elif operation == "BatchGetItem":
        for name, spec in request.get("RequestItems", {}).items():
            table = lookup(name)
            if table is None:
                return None
            for index, key in enumerate(spec.get("Keys", [])):
                p.reads.append((table, partition_of(table, key)))
                p.slots.append((name, index))
    else:
        return None
    return p
