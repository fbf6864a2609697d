"""DynamoDB throughput for the moto child, without I/O: what a request costs, and what AWS answers when a table
or key runs out. Token buckets per partition key value (one second of burst) and per table (a provisioned
table's RCU/WCU with ``dynamodb_burst_seconds`` of burst; an on-demand table's quota). Writes are sized from the
request and taken up front; reads are let in while their buckets hold no debt and charged from the response."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from tools.coordination import billing
from tools.coordination.billing import read_units
from tools.emulators.limits import Keyed, Limits, TokenBucket

PROVISIONED_MESSAGE: Final = (
    "The level of configured provisioned throughput for the table was exceeded. "
    "Consider increasing your provisioning level with the UpdateTable API."
)
ON_DEMAND_MESSAGE: Final = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically scaling your "
    "table or index so please try again shortly. If exceptions persist, check if you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
)
_PREFIX: Final = "com.amazonaws.dynamodb.v20120810#"
_BATCHES: Final = ("BatchWriteItem", "BatchGetItem")


@dataclass(frozen=True)
class TableInfo:
    """What the limiter needs to know of a table."""

    name: str
    arn: str
    hash_key: str
    on_demand: bool
    rcu: float = 0.0
    wcu: float = 0.0


Lookup = Callable[[str], TableInfo | None]


@dataclass(frozen=True)
class Throttle:
    """A refused request: which table, read or write, and whether the partition or the table ran out."""

    table: TableInfo
    write: bool
    partition: bool

    @property
    def code(self) -> str:
        """The error code AWS answers with."""
        return "ThrottlingException" if self.table.on_demand else "ProvisionedThroughputExceededException"

    @property
    def reason(self) -> str:
        """The ``ThrottlingReasons`` reason."""
        limit = "AccountLimit" if self.table.on_demand else "ProvisionedThroughput"
        return f"Table{'Write' if self.write else 'Read'}{'KeyRangeThroughput' if self.partition else limit}Exceeded"

    def body(self) -> bytes:
        """The JSON 1.0 error body AWS sends (HTTP 400)."""
        reasons = [{"reason": self.reason, "resource": self.table.arn}]
        message = ON_DEMAND_MESSAGE if self.table.on_demand else PROVISIONED_MESSAGE
        key = "throttlingReasons" if self.table.on_demand else "ThrottlingReasons"
        return json.dumps({"__type": _PREFIX + self.code, "message": message, key: reasons}).encode()


def write_units(item_json_size: int, transactional: bool = False) -> float:
    """WCUs of a write of an item whose JSON is ``item_json_size`` bytes (1 per KB, at least 1; 2x in a transaction)."""
    return billing.write_units(item_json_size) * (2.0 if transactional else 1.0)


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (the stand-in for DynamoDB's item size)."""
    return len(json.dumps(value, separators=(",", ":")))


def partition_of(table: TableInfo, key_or_item: dict[str, Any] | None) -> str | None:
    """The partition key value of a Key or Item as a canonical string (None when absent)."""
    if not key_or_item or table.hash_key not in key_or_item:
        return None
    return json.dumps(key_or_item[table.hash_key], sort_keys=True, separators=(",", ":"))


class DynamoDBLimiter:
    """Capacity per table and per partition key. Thread-safe (one lock, held briefly)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._tables: dict[tuple[str, bool, float], TokenBucket] = {}
        self._partitions: dict[bool, Keyed[TokenBucket] | None] = {}
        for write, name in ((False, "dynamodb_partition_rcu"), (True, "dynamodb_partition_wcu")):
            rate = limits.active(name)
            self._partitions[write] = None if rate is None else Keyed(partial(TokenBucket, rate, rate))

    def _buckets(
        self, table: TableInfo, partition: str | None, write: bool, now: float
    ) -> list[tuple[TokenBucket, bool]]:
        """The buckets a read or write draws on, table first, each with "is the partition's"."""
        limits = self.limits
        if not limits.enabled:
            return []
        if table.on_demand:
            rate = limits.dynamodb_on_demand_table_wru if write else limits.dynamodb_on_demand_table_rru
            burst = 1.0
        else:
            rate, burst = (table.wcu if write else table.rcu), limits.dynamodb_burst_seconds
        found: list[tuple[TokenBucket, bool]] = []
        if rate:
            bucket = TokenBucket(rate, max(rate * burst, rate), now)
            found.append((self._tables.setdefault((table.arn, write, rate), bucket), False))
        partitions = self._partitions[write]
        if partitions is not None and partition is not None:
            found.append((partitions.at((table.arn, partition)), True))
        return found

    def take_writes(
        self, writes: list[tuple[TableInfo, str | None, float]], now: float
    ) -> list[Throttle | None]:
        """Take the units of several writes (one request) all or nothing: a Throttle per refused write."""
        with self._lock:
            need: dict[int, tuple[TokenBucket, float]] = {}
            verdicts: list[Throttle | None] = []
            for table, partition, units in writes:
                verdict: Throttle | None = None
                for bucket, is_partition in self._buckets(table, partition, True, now):
                    held = need.get(id(bucket), (bucket, 0.0))[1] + units
                    need[id(bucket)] = (bucket, held)
                    if verdict is None and bucket.available(now) < min(held, bucket.capacity):
                        verdict = Throttle(table, write=True, partition=is_partition)
                verdicts.append(verdict)
            if all(v is None for v in verdicts):
                for bucket, held in need.values():
                    bucket.charge(now, held)
            return verdicts

    def admit_reads(self, reads: list[tuple[TableInfo, str | None]], now: float) -> list[Throttle | None]:
        """Let reads in while their table and partition buckets hold no debt."""
        verdicts: list[Throttle | None] = []
        with self._lock:
            for table, partition in reads:
                empty = [
                    p for bucket, p in self._buckets(table, partition, False, now) if not bucket.admit(now)
                ]
                verdicts.append(Throttle(table, write=False, partition=empty[0]) if empty else None)
        return verdicts

    def charge_reads(self, reads: list[tuple[TableInfo, str | None, float]], now: float) -> None:
        """Charge served reads' units (the level may go into debt)."""
        with self._lock:
            for table, partition, units in reads:
                for bucket, _ in self._buckets(table, partition, False, now):
                    bucket.charge(now, units)


def transaction_cancelled(verdicts: list[Throttle | None]) -> bytes:
    """TransactionCanceledException with a reason for each throttled item, as AWS answers a transaction whose
    items are throttled: ``ThrottlingError`` on an on-demand table, ``ProvisionedThroughputExceeded`` else."""
    reasons = [
        {"Code": "None"}
        if v is None
        else {"Code": "ThrottlingError", "Message": ON_DEMAND_MESSAGE}
        if v.table.on_demand
        else {"Code": "ProvisionedThroughputExceeded", "Message": PROVISIONED_MESSAGE}
        for v in verdicts
    ]
    codes = ", ".join(r["Code"] for r in reasons)
    return json.dumps(
        {
            "__type": _PREFIX + "TransactionCanceledException",
            "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
            "CancellationReasons": reasons,
        }
    ).encode()


@dataclass
class Plan:
    """The capacity one request needs: its writes (sized from the request) and reads (charged from the answer)."""

    operation: str
    request: dict[str, Any]
    writes: list[tuple[TableInfo, str | None, float]] = field(default_factory=list)
    reads: list[tuple[TableInfo, str | None]] = field(default_factory=list)
    #: for batches: (table name, index in its list) of each write/read, to rebuild the request
    slots: list[tuple[str, int]] = field(default_factory=list)
    #: throttled batch entries by table, returned as UnprocessedItems / UnprocessedKeys
    unprocessed: dict[str, list[Any]] = field(default_factory=dict)

    def admit(self, limiter: DynamoDBLimiter, now: float) -> tuple[bytes | None, dict[str, Any] | None]:
        """(error body, None) to refuse; (None, new request) to send a reduced batch; (None, None) to pass."""
        batch = self.operation in _BATCHES
        if not self.writes:
            verdicts = limiter.admit_reads(self.reads, now)
        elif batch:  # each entry on its own: some may pass
            verdicts = [limiter.take_writes([write], now)[0] for write in self.writes]
        else:
            verdicts = limiter.take_writes(self.writes, now)
        refused = [v for v in verdicts if v is not None]
        if not refused:
            return None, None
        if self.operation.startswith("Transact"):
            return transaction_cancelled(verdicts), None
        if not batch or len(refused) == len(verdicts):
            return refused[0].body(), None
        items = self.request["RequestItems"]
        keep: dict[str, list[Any]] = {}
        for (table, index), verdict in zip(self.slots, verdicts, strict=True):
            entry = items[table][index] if self.operation == "BatchWriteItem" else items[table]["Keys"][index]
            (keep if verdict is None else self.unprocessed).setdefault(table, []).append(entry)
        if self.operation == "BatchWriteItem":
            return None, {**self.request, "RequestItems": keep}
        return None, {
            **self.request,
            "RequestItems": {t: {**items[t], "Keys": keys} for t, keys in keep.items()},
        }

    def served(self, limiter: DynamoDBLimiter, answer: bytes, now: float) -> bytes:
        """Charge the reads of a served request; add throttled batch items to its Unprocessed* field. (An error
        answer, with its ``__type``, is left as it is.)"""
        if not self.reads and not self.unprocessed:
            return answer
        try:
            parsed = json.loads(answer)
        except ValueError:
            return answer
        if "__type" in parsed:
            return answer
        if self.reads:
            limiter.charge_reads(self._read_costs(parsed), now)
        if not self.unprocessed:
            return answer
        for table, entries in self.unprocessed.items():
            if self.operation == "BatchWriteItem":
                parsed.setdefault("UnprocessedItems", {}).setdefault(table, []).extend(entries)
            else:
                empty = {**self.request["RequestItems"][table], "Keys": []}
                parsed.setdefault("UnprocessedKeys", {}).setdefault(table, empty)["Keys"].extend(entries)
        return json.dumps(parsed).encode()

    def _read_costs(self, parsed: dict[str, Any]) -> list[tuple[TableInfo, str | None, float]]:
        op, consistent = self.operation, bool(self.request.get("ConsistentRead"))
        if op == "GetItem":
            table, part = self.reads[0]
            return [(table, part, read_units(json_size(parsed.get("Item", {})), consistent))]
        if op in ("Query", "Scan"):
            table, _ = self.reads[0]
            items = parsed.get("Items", [])
            by_key = op == "Query" and items and "IndexName" not in self.request
            part = partition_of(table, items[0]) if by_key else None
            return [(table, part, read_units(sum(json_size(item) for item in items), consistent))]
        if op == "TransactGetItems":
            return [
                (table, part, read_units(json_size(r.get("Item", {})), True, transactional=True))
                for (table, part), r in zip(self.reads, parsed.get("Responses", []), strict=False)
            ]
        costs = []  # BatchGetItem
        by_name = {table.name: table for table, _ in self.reads}
        for name, items in parsed.get("Responses", {}).items():
            if (found := by_name.get(name.rsplit(":table/", 1)[-1])) is not None:
                strong = bool(self.request["RequestItems"].get(name, {}).get("ConsistentRead"))
                costs += [(found, partition_of(found, it), read_units(json_size(it), strong)) for it in items]
        return costs


def plan(operation: str, request: dict[str, Any], lookup: Lookup) -> Plan | None:
    """The capacity ``request`` needs, or None for an operation without throughput (control plane, or a
    table that does not exist: moto answers that itself)."""
    p = Plan(operation, request)
    # (table name, Key or Item, write units or None for a read, batch slot or None) of each entry
    entries: list[tuple[str, dict[str, Any] | None, float | None, tuple[str, int] | None]] = []
    if operation in ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"):
        single = operation != "TransactWriteItems"  # a PutItem is sized as a transaction's Put, at 1x
        for entry in (
            [{operation.removesuffix("Item"): request}] if single else request.get("TransactItems", [])
        ):
            kind, body = next(iter(entry.items()))
            item = body.get("Item") if kind == "Put" else body.get("Key")
            size = json_size(item) + json_size(body.get("ExpressionAttributeValues", {}))
            entries.append((str(body.get("TableName", "")), item, write_units(size, not single), None))
    elif operation == "BatchWriteItem":
        for name, writes in request.get("RequestItems", {}).items():
            for index, entry in enumerate(writes):
                body = entry.get("PutRequest", {}).get("Item") or entry.get("DeleteRequest", {}).get("Key")
                entries.append((name, body, write_units(json_size(body)), (name, index)))
    elif operation in ("GetItem", "Query", "Scan", "TransactGetItems"):
        single = operation != "TransactGetItems"
        bodies = [request] if single else [entry.get("Get", {}) for entry in request.get("TransactItems", [])]
        entries += [(str(body.get("TableName", "")), body.get("Key"), None, None) for body in bodies]
    elif operation == "BatchGetItem":
        for name, spec in request.get("RequestItems", {}).items():
            entries += [(name, key, None, (name, index)) for index, key in enumerate(spec.get("Keys", []))]
    else:
        return None
    for name, key, units, slot in entries:
        table = lookup(name)
        if table is None:
            return None
        if units is None:
            p.reads.append((table, partition_of(table, key)))
        else:
            p.writes.append((table, partition_of(table, key), units))
        if slot is not None:
            p.slots.append(slot)
    return p
