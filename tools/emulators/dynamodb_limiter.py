"""DynamoDB throughput decisions, without I/O: capacity units per table and per partition key value.

Used inside the moto child (``tools/_emulator_moto.py``), which tells it each table's capacity mode and
provisioned units. Rates are token buckets on the caller's monotonic clock:

* per partition key value (both modes): ``dynamodb_partition_rcu`` / ``dynamodb_partition_wcu`` per second,
  one second's worth of burst;
* per table: a provisioned table's own RCU/WCU with ``dynamodb_burst_seconds`` of burst; an on-demand table
  ``dynamodb_on_demand_table_rru`` / ``..._wru`` per second (the per-table account quota).

Writes are sized from the request (1 WCU per KB of item JSON, at least 1; 2x in a transaction) and taken up
front; reads are let in while their buckets hold no debt and charged from the response (1 RCU per 4 KB, half
for eventually consistent reads, 2x in a transaction). A provisioned table answers
ProvisionedThroughputExceededException; an on-demand table ThrottlingException (what AWS returns for hot keys
on on-demand tables), both with ``ThrottlingReasons`` as in the DynamoDB API reference.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from dataclasses import dataclass
from typing import Any, Final

from tools.emulators.limits import Limits
from tools.emulators.rates import Keyed, TokenBucket

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class TableInfo:
    """What the limiter needs to know of a table."""

    name: str
    arn: str
    hash_key: str
    on_demand: bool
    rcu: float = 0.0
    wcu: float = 0.0


@dataclass(frozen=True)
class Throttle:
    """A refused request: which table, read or write, and whether the partition or the table ran out."""

    table: TableInfo
    write: bool
    partition: bool

    @property
    def code(self) -> str:
        return "ThrottlingException" if self.table.on_demand else "ProvisionedThroughputExceededException"

    @property
    def reason(self) -> str:
        kind = "Write" if self.write else "Read"
        if self.partition:
            return f"Table{kind}KeyRangeThroughputExceeded"
        limit = "AccountLimitExceeded" if self.table.on_demand else "ProvisionedThroughputExceeded"
        return f"Table{kind}{limit}"

    def body(self) -> bytes:
        """The JSON 1.0 error body AWS sends (HTTP 400)."""
        reasons = [{"reason": self.reason, "resource": self.table.arn}]
        message = ON_DEMAND_MESSAGE if self.table.on_demand else PROVISIONED_MESSAGE
        field = "throttlingReasons" if self.table.on_demand else "ThrottlingReasons"
        return json.dumps({"__type": _PREFIX + self.code, "message": message, field: reasons}).encode()


def write_units(item_json_size: int, transactional: bool = False) -> float:
    """WCUs of a write of an item whose JSON is ``item_json_size`` bytes (1 per KB, at least 1)."""
    units = max(1, math.ceil(item_json_size / 1024))
    return 2.0 * units if transactional else float(units)


def read_units(size: int, consistent: bool, transactional: bool = False) -> float:
    """RCUs of reading ``size`` bytes (1 per 4 KB; half when eventually consistent; 2x in a transaction)."""
    units = max(1, math.ceil(size / 4096))
    if transactional:
        return 2.0 * units
    return float(units) if consistent else units / 2


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
        self._table_buckets: dict[tuple[str, bool, float], TokenBucket] = {}
        self._partitions_r: Keyed[TokenBucket] | None = self._partition_buckets("dynamodb_partition_rcu")
        self._partitions_w: Keyed[TokenBucket] | None = self._partition_buckets("dynamodb_partition_wcu")
        self.refusals: dict[str, int] = {}

    def _partition_buckets(self, field_name: str) -> Keyed[TokenBucket] | None:
        rate = self.limits.active(field_name)
        if rate is None:
            return None
        return Keyed(lambda now: TokenBucket(rate, rate, now))

    @property
    def enabled(self) -> bool:
        return self.limits.enabled

    def _table_bucket(self, table: TableInfo, write: bool, now: float) -> TokenBucket | None:
        if table.on_demand:
            rate = self.limits.active(
                "dynamodb_on_demand_table_wru" if write else "dynamodb_on_demand_table_rru"
            )
            burst = 1.0
        else:
            rate = (table.wcu if write else table.rcu) if self.limits.enabled else None
            burst = self.limits.dynamodb_burst_seconds
        if not rate:
            return None
        key = (table.arn, write, rate)
        bucket = self._table_buckets.get(key)
        if bucket is None:
            bucket = self._table_buckets[key] = TokenBucket(rate, max(rate * burst, rate), now)
        return bucket

    def _partition_bucket(
        self, table: TableInfo, partition: str | None, write: bool, now: float
    ) -> TokenBucket | None:
        keyed = self._partitions_w if write else self._partitions_r
        if keyed is None or partition is None or not self.limits.enabled:
            return None
        return keyed.get((table.arn, partition), now)

    def take_writes(
        self, writes: list[tuple[TableInfo, str | None, float]], now: float
    ) -> list[Throttle | None]:
        """Take the units of several writes (one request) all or nothing: a Throttle per refused write."""
        with self._lock:
            need: dict[int, tuple[TokenBucket, float]] = {}
            verdicts: list[Throttle | None] = []
            for table, partition, units in writes:
                verdict: Throttle | None = None
                for bucket, is_partition in (
                    (self._table_bucket(table, True, now), False),
                    (self._partition_bucket(table, partition, True, now), True),
                ):
                    if bucket is None:
                        continue
                    held = need.get(id(bucket), (bucket, 0.0))[1] + units
                    need[id(bucket)] = (bucket, held)
                    if verdict is None and bucket.available(now) < min(held, bucket.capacity):
                        verdict = Throttle(table, write=True, partition=is_partition)
                verdicts.append(verdict)
            if any(v is not None for v in verdicts):
                self._count("write", sum(v is not None for v in verdicts))
                return verdicts
            for bucket, held in need.values():
                bucket.charge(now, held)
            return verdicts

    def admit_reads(self, reads: list[tuple[TableInfo, str | None]], now: float) -> list[Throttle | None]:
        """Let reads in while their table and partition buckets hold no debt."""
        with self._lock:
            verdicts: list[Throttle | None] = []
            for table, partition in reads:
                verdict: Throttle | None = None
                table_bucket = self._table_bucket(table, False, now)
                part_bucket = self._partition_bucket(table, partition, False, now)
                if table_bucket is not None and not table_bucket.admit(now):
                    verdict = Throttle(table, write=False, partition=False)
                elif part_bucket is not None and not part_bucket.admit(now):
                    verdict = Throttle(table, write=False, partition=True)
                verdicts.append(verdict)
            refused = sum(v is not None for v in verdicts)
            if refused:
                self._count("read", refused)
            return verdicts

    def charge_reads(self, reads: list[tuple[TableInfo, str | None, float]], now: float) -> None:
        """Charge served reads' units (the level may go into debt)."""
        with self._lock:
            for table, partition, units in reads:
                for bucket in (
                    self._table_bucket(table, False, now),
                    self._partition_bucket(table, partition, False, now),
                ):
                    if bucket is not None:
                        bucket.charge(now, units)

    def _count(self, kind: str, n: int) -> None:
        self.refusals[kind] = self.refusals.get(kind, 0) + n


# ------------------------------------------------------------------------------------- requests and answers

TRANSACTION_THROTTLED: Final = "ThrottlingError"


def transaction_cancelled(verdicts: list[Throttle | None]) -> bytes:
    """TransactionCanceledException naming ``ThrottlingError`` for each throttled item, as AWS answers a
    transaction whose items are throttled."""
    reasons: list[dict[str, str]] = []
    for verdict in verdicts:
        if verdict is None:
            reasons.append({"Code": "None"})
        else:
            reasons.append({"Code": TRANSACTION_THROTTLED, "Message": ON_DEMAND_MESSAGE})
    codes = ", ".join(r["Code"] for r in reasons)
    return json.dumps(
        {
            "__type": _PREFIX + "TransactionCanceledException",
            "Message": f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
            "CancellationReasons": reasons,
        }
    ).encode()


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (the stand-in for DynamoDB's item size)."""
    return len(json.dumps(value, separators=(",", ":")))
