"""How ``status`` reads the checkpoints of the leases it shows: one scan of the checkpoint table, or one read a
lease from a store that cannot be scanned."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from consumer.checkpoint.store import CheckpointStore
from consumer.dynamo import from_item, translate_errors
from consumer.errors import ConfigError
from consumer.leases.model import Lease
from consumer.records import Position

__all__ = ["Checkpoints", "scanned_checkpoints", "stored_checkpoints"]

#: Reads the checkpoints of these leases: ``{(stream, shard_id): position}`` (absent: none stored).
Checkpoints = Callable[[Sequence[Lease]], Mapping[tuple[str, str], Position | None]]


def scanned_checkpoints(client: Any, table: str) -> Checkpoints:
    """Every checkpoint of the table in one scan (one request per MB of items), whatever the leases."""

    def read(leases: Sequence[Lease]) -> Mapping[tuple[str, str], Position | None]:
        out: dict[tuple[str, str], Position | None] = {}
        kwargs: dict[str, Any] = {
            "TableName": table,
            "ConsistentRead": True,
            "ProjectionExpression": "lease_key, #seq, sub_sequence",
            "ExpressionAttributeNames": {"#seq": "sequence"},
        }
        with translate_errors(table, "scan checkpoints"):
            while True:
                page = client.scan(**kwargs)
                for raw in page.get("Items", []):
                    d = from_item(raw)
                    kind, stream, shard_id = [*str(d["lease_key"]).split("#", 2), "", ""][:3]
                    if kind != "shard" or not stream or not shard_id:  # a worker's or the leader's item
                        raise ConfigError(
                            "--checkpoint-table",
                            f"{table} holds {d['lease_key']!r}, which is not a checkpoint: is it the lease "
                            "table? (give the checkpoint table there and the lease table as --lease-table)",
                        )
                    seq = d.get("sequence")
                    out[(stream, shard_id)] = (
                        None if seq is None else Position(str(seq), int(d.get("sub_sequence", 0)))
                    )
                if "LastEvaluatedKey" not in page:
                    return out
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    return read


def stored_checkpoints(store: CheckpointStore) -> Checkpoints:
    """The checkpoints of the leases, one read each (for stores that cannot be scanned, e.g. in tests)."""

    def read(leases: Sequence[Lease]) -> Mapping[tuple[str, str], Position | None]:
        items = {(x.stream, x.shard_id): store.get(x.stream, x.shard_id) for x in leases}
        return {k: item.position for k, item in items.items() if item is not None}

    return read
