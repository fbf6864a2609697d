"""The start-up checks of the lease and checkpoint tables: each exists, ACTIVE, with the consumer's key schema;
neither holds the other's items; and the two are one application's pair. ``consumer.preflight`` runs them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from consumer.aws_errors import aws_call
from consumer.dynamo import from_item
from consumer.errors import ConfigError, MissingResourceError

__all__ = [
    "CONFIG_NAMES",
    "ENV_NAMES",
    "LEASE_KEY",
    "SettingNames",
    "check_table_pair",
    "check_table_roles",
    "check_table_schema",
]

LEASE_KEY = "lease_key"
_ACTIVE_TABLE = {"ACTIVE", "UPDATING"}


@dataclass(frozen=True)
class SettingNames:
    """What the start-up checks' errors name for each setting they check: what the user set it with."""

    lease_table: str
    checkpoint_table: str
    streams: str
    dlq_url: str


#: Settings read from the environment (the CLI, ``create_worker(env=...)``): the variables.
ENV_NAMES = SettingNames(
    lease_table="CONSUMER_LEASE_TABLE",
    checkpoint_table="CONSUMER_CHECKPOINT_TABLE",
    streams="CONSUMER_STREAMS",
    dlq_url="CONSUMER_DLQ_URL",
)
#: A typed ``WorkerConfig`` given in code: its fields, as its own validation names them.
CONFIG_NAMES = SettingNames(
    lease_table="lease_table",
    checkpoint_table="checkpoint_table",
    streams="streams",
    dlq_url="processing.dlq_url",
)


def _describe_key(table: dict[str, Any]) -> str:
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    parts = [
        f"{k['AttributeName']} ({types.get(k['AttributeName'], '?')}, {k['KeyType']})"
        for k in table.get("KeySchema", [])
    ]
    return " + ".join(parts) or "no key"


def check_table_schema(ddb: Any, table: str, setting: str) -> None:
    """The table exists, is ACTIVE, and its only key is the hash key ``lease_key`` of type S."""
    with aws_call("dynamodb", f"describe table {table!r}", setting):
        try:
            desc = ddb.describe_table(TableName=table)["Table"]
        except ddb.exceptions.ResourceNotFoundException:
            raise MissingResourceError(
                f"{setting}: DynamoDB table {table!r} does not exist. Create it with `python -m consumer "
                f"create-tables --lease-table ... --checkpoint-table ...` (local use) or deploy the state "
                f"stack, or fix {setting}."
            ) from None
    keys = [(k["AttributeName"], k["KeyType"]) for k in desc.get("KeySchema", [])]
    types = {a["AttributeName"]: a["AttributeType"] for a in desc.get("AttributeDefinitions", [])}
    if keys != [(LEASE_KEY, "HASH")] or types.get(LEASE_KEY) != "S":
        raise ConfigError(
            setting,
            f"DynamoDB table {table!r} has the key {_describe_key(desc)}; the consumer needs the hash key "
            f"{LEASE_KEY} (S) and no sort key. Point {setting} at a table made by `python -m consumer "
            "create-tables` or the state stack.",
        )
    if desc.get("TableStatus") not in _ACTIVE_TABLE:
        raise MissingResourceError(
            f"{setting}: DynamoDB table {table!r} is {desc.get('TableStatus')}, not ACTIVE"
        )


def check_table_roles(
    ddb: Any, lease_table: str, checkpoint_table: str, names: SettingNames = ENV_NAMES
) -> None:
    """Neither table holds the other's items (both have the same key, so the schema check cannot tell them
    apart): a few items of each are read; a lease table holds typed items, a checkpoint table untyped ones.
    Then the two are one application's pair (``check_table_pair``). ``names``: the settings the errors name
    (default the variables)."""
    read: dict[str, list[dict[str, Any]]] = {}
    for table, setting, typed in (
        (lease_table, names.lease_table, True),
        (checkpoint_table, names.checkpoint_table, False),
    ):
        with aws_call("dynamodb", f"read a few items of {table!r}", setting):
            items = [from_item(i) for i in ddb.scan(TableName=table, Limit=25).get("Items", [])]
        if (item := next((d for d in items if ("item_type" in d) != typed), None)) is not None:
            holds = "checkpoints" if typed else "leases and workers"
            raise ConfigError(
                setting,
                f"DynamoDB table {table!r} holds {holds} (item {item.get('lease_key')!r}): are "
                f"{names.lease_table} and {names.checkpoint_table} swapped?",
            )
        read[table] = items
    check_table_pair(ddb, lease_table, checkpoint_table, read[checkpoint_table], names)


def check_table_pair(
    ddb: Any,
    lease_table: str,
    checkpoint_table: str,
    checkpoints: list[dict[str, Any]],
    names: SettingNames = ENV_NAMES,
) -> None:
    """The checkpoint table belongs to the lease table: each of a few ``checkpoints`` (items read from it) that
    carries an epoch has its lease in the lease table at that epoch. Every ownership change moves both in one
    transaction, so in one application's pair they never differ; a lease table replaced while the checkpoint
    table was kept (a rolling restart that changed only ``CONSUMER_LEASE_TABLE``) would have every lease
    assignment refused by the checkpoint's epoch, for ever. One BatchGetItem of at most 25 keys."""
    epochs = {str(d["lease_key"]): int(d["epoch"]) for d in checkpoints if "epoch" in d and "lease_key" in d}
    if not epochs:
        return
    with aws_call("dynamodb", f"read the leases of a few checkpoints in {lease_table!r}", names.lease_table):
        out = ddb.batch_get_item(
            RequestItems={
                lease_table: {
                    "Keys": [{"lease_key": {"S": key}} for key in sorted(epochs)],
                    "ConsistentRead": True,
                    "ProjectionExpression": "lease_key, epoch",
                }
            }
        )
    leases = {
        str(d["lease_key"]): int(d.get("epoch", 0)) for d in map(from_item, out["Responses"][lease_table])
    }
    unread = {
        k["lease_key"]["S"] for k in out.get("UnprocessedKeys", {}).get(lease_table, {}).get("Keys", [])
    }
    for key in sorted(epochs):
        if key in unread or leases.get(key) == epochs[key]:
            continue
        # Read apart, they may differ while the fleet moves the lease (or retires it): read both at once.
        pair = _read_pair(ddb, lease_table, checkpoint_table, key, names.lease_table)
        if pair is None:
            continue
        lease, epoch = pair
        raise ConfigError(
            names.checkpoint_table,
            f"DynamoDB table {checkpoint_table!r} holds checkpoints of leases that {lease_table!r} does not "
            f"hold ({key}: its checkpoint at epoch {epoch}, its lease {lease}): the two tables are not one "
            f"application's pair, and no lease could be assigned. Point {names.lease_table} and "
            f"{names.checkpoint_table} at the tables of one application (a new lease table needs a new "
            "checkpoint table).",
        )


def _read_pair(
    ddb: Any, lease_table: str, checkpoint_table: str, key: str, setting: str
) -> tuple[str, int] | None:
    """A lease and its checkpoint read at once (TransactGetItems): how the lease stands and the checkpoint's
    epoch when they differ, else None."""
    item = {"Key": {"lease_key": {"S": key}}, "ProjectionExpression": "lease_key, epoch"}
    with aws_call("dynamodb", f"read {key} in {lease_table!r} and {checkpoint_table!r}", setting):
        out = ddb.transact_get_items(
            TransactItems=[{"Get": {"TableName": t, **item}} for t in (lease_table, checkpoint_table)]
        )
    lease, checkpoint = (from_item(r.get("Item", {})) for r in out["Responses"])
    if "epoch" not in checkpoint or (
        "lease_key" in lease and int(lease.get("epoch", 0)) == int(checkpoint["epoch"])
    ):
        return None
    return (f"at epoch {int(lease.get('epoch', 0))}" if "lease_key" in lease else "absent"), int(
        checkpoint["epoch"]
    )
