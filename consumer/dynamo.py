"""Shared DynamoDB plumbing: item (de)serialization, error translation and a per-call counter."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from consumer.aws import transient
from consumer.errors import LeaseConflictError, MissingResourceError, ThrottledError, TransientError

__all__ = ["DynamoCalls", "create_tables", "from_item", "to_item", "translate_errors"]

logger = logging.getLogger(__name__)
_ser = TypeSerializer()
_de = TypeDeserializer()


def _is_conflict(exc: ClientError) -> bool:
    """A condition did not hold. A cancelled transaction is a conflict only when one of its conditions
    failed; cancelled for throttling or a concurrent transaction it is worth retrying."""
    code = exc.response.get("Error", {}).get("Code", "")
    if code == "ConditionalCheckFailedException":
        return True
    if code != "TransactionCanceledException":
        return False
    reasons = exc.response.get("CancellationReasons")
    if reasons is None:  # not parsed (older emulators): the message lists them as [Code, Code, ...]
        return "ConditionalCheckFailed" in str(exc.response.get("Error", {}).get("Message", ""))
    return any(r.get("Code") == "ConditionalCheckFailed" for r in reasons)


_THROTTLED_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})


def _cancelled(exc: ClientError, what: str) -> TransientError | None:
    """A transaction cancelled for no condition of its own: throttled items (``ThrottledError``) or another
    transaction under way on an item (``TransientError``); both are worth trying again."""
    if exc.response.get("Error", {}).get("Code") != "TransactionCanceledException":
        return None
    reasons = {str(r.get("Code")) for r in exc.response.get("CancellationReasons") or ()}
    if reasons & _THROTTLED_REASONS:
        return ThrottledError(f"{what}: transaction throttled")
    if "TransactionConflict" in reasons:
        return TransientError(f"{what}: TransactionConflict")
    return None


def to_item(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _ser.serialize(v) for k, v in values.items() if v is not None}


def from_item(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _de.deserialize(v) for k, v in item.items()}


class DynamoCalls:
    """Counts DynamoDB requests by operation (the cost figures in docs/ come from these counters)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, op: str) -> None:
        self.counts[op] += 1


@contextmanager
def translate_errors(table: str, what: str) -> Iterator[None]:
    """Turn provider errors into this package's errors, keeping the cause."""
    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if _is_conflict(exc):
            raise LeaseConflictError(f"{what}: condition failed on {table}") from exc
        if code == "ResourceNotFoundException":
            raise MissingResourceError(
                f"DynamoDB table {table!r} does not exist. Create it with "
                f"`python -m consumer create-tables --lease-table ... --checkpoint-table ...` "
                "(local use) or deploy the state stack."
            ) from exc
        if (error := _cancelled(exc, f"{what} on {table}")) is not None:
            raise error from exc
        if (error := transient(exc, f"{what} on {table}")) is not None:
            raise error from exc
        raise
    except Exception as exc:  # transport failures (refused, reset, timed out) are not ClientErrors
        if (error := transient(exc, f"{what} on {table}")) is not None:
            raise error from exc
        raise


def create_tables(client: Any, lease_table: str, checkpoint_table: str) -> None:
    """Create both tables (on-demand, key ``lease_key``) if missing, and wait until they exist."""
    existing = set(client.list_tables().get("TableNames", []))
    for name in (lease_table, checkpoint_table):
        if name in existing:
            continue
        client.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "lease_key", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "lease_key", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
        logger.info("table created", extra={"event": "table_created", "table": name})
