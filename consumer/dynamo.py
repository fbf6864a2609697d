"""Shared DynamoDB plumbing: item (de)serialization, error translation and a per-call counter."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from consumer.aws_errors import PROVIDER_FAILURES, classify
from consumer.errors import LeaseConflictError, MissingResourceError

__all__ = ["DynamoCalls", "create_tables", "existing_tables", "from_item", "to_item", "translate_errors"]

logger = logging.getLogger(__name__)
_NOT_FOUND = "ResourceNotFoundException"
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
def translate_errors(table: str, what: str, *others: str) -> Iterator[None]:
    """Turn provider errors into this package's errors, keeping the cause: a failed condition is a
    ``LeaseConflictError``, a missing table says how to create it, the rest is ``classify``'s; an error of
    ours (a bug) goes through as it is. ``others``: the other tables a transaction writes (DynamoDB does
    not say which one is missing, so the message names them all)."""
    try:
        yield
    except PROVIDER_FAILURES as exc:
        if isinstance(exc, ClientError) and _is_conflict(exc):
            raise LeaseConflictError(f"{what}: condition failed on {table}") from exc
        if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == _NOT_FOUND:
            names = " or ".join(repr(t) for t in (table, *others))
            raise MissingResourceError(
                f"DynamoDB table {names} does not exist ({what}). Create it with "
                f"`python -m consumer create-tables --lease-table ... --checkpoint-table ...` "
                "(local use) or deploy the state stack."
            ) from exc
        raise classify(exc, "dynamodb", f"{what} on {table}") from exc


def existing_tables(client: Any, names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` exist, asked table by table (ListTables answers 100 names a page: a table past
    the first page was once taken for missing, and its creation refused)."""
    found = set()
    for name in names:
        try:
            client.describe_table(TableName=name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != _NOT_FOUND:
                raise
        else:
            found.add(name)
    return found


def create_tables(
    client: Any, lease_table: str, checkpoint_table: str, existing: set[str] | None = None
) -> None:
    """Create both tables (on-demand, key ``lease_key``) if missing, and wait until they exist. ``existing``:
    which of them the caller already found (``existing_tables``); asked here when not given."""
    if existing is None:
        existing = existing_tables(client, (lease_table, checkpoint_table))
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
