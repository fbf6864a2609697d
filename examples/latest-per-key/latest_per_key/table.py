"""The newest record of each partition key, in a DynamoDB table that refuses writes from an older epoch.

Each item holds the shard it came from, the ownership epoch of the worker that wrote it and the record's
position. A write succeeds only if it does not go backwards: the same shard's item is overwritten only by the
same or a newer epoch, at the same or a later position. A worker that lost the shard (a paused zombie, whose
epoch is older than the new owner's) is refused by DynamoDB itself, whatever it thinks it owns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from consumer.errors import LeaseLostError
from consumer.records import Record

__all__ = ["KEY_ATTRIBUTE", "FencedLatestTable", "StaleEpochError", "position"]

logger = logging.getLogger(__name__)

#: The table's partition key (cdk.json: consumer.processor_table.partition_key).
KEY_ATTRIBUTE = "key"


class StaleEpochError(LeaseLostError):
    """The table holds a newer owner's write for this key: this worker no longer owns the shard."""


def position(record: Record) -> str:
    """The record's position as a string that sorts like the position (sequence numbers have up to 56
    digits, KPL sub-sequence numbers a few): zero-padded, so DynamoDB's string comparison orders them."""
    return f"{int(record.sequence_number):064d}.{record.sub_sequence_number:08d}"


@dataclass(frozen=True)
class Write:
    """One accepted or refused upsert (for logs and tests)."""

    key: str
    accepted: bool
    stored_epoch: int | None = None


class FencedLatestTable:
    """Conditional upserts into the table ``name`` (partition key ``key``, a string) with ``client``."""

    def __init__(self, client: Any, name: str) -> None:
        self._client = client
        self.name = name

    def upsert(self, shard_id: str, epoch: int, record: Record) -> Write:
        """Store ``record`` as its key's newest, unless that would go backwards.

        Returns the write, accepted or refused as a redelivery (same epoch or newer owner already past this
        position); raises :class:`StaleEpochError` when a newer epoch of the same shard wrote the key.
        """
        try:
            self._client.update_item(
                TableName=self.name,
                Key={KEY_ATTRIBUTE: {"S": record.partition_key}},
                UpdateExpression="SET #shard = :shard, #epoch = :epoch, #pos = :pos, #data = :data",
                ConditionExpression=(
                    # the key's first write
                    "attribute_not_exists(#epoch)"
                    # the key moved to another shard (a reshard; parents are consumed before children)
                    " OR #shard <> :shard"
                    # the same shard: never an older owner, never an earlier position
                    " OR (#epoch <= :epoch AND #pos <= :pos)"
                ),
                ExpressionAttributeNames={
                    "#shard": "shard",
                    "#epoch": "epoch",
                    "#pos": "pos",
                    "#data": "data",
                },
                ExpressionAttributeValues={
                    ":shard": {"S": shard_id},
                    ":epoch": {"N": str(epoch)},
                    ":pos": {"S": position(record)},
                    ":data": {"B": record.data},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            stored = int(exc.response.get("Item", {}).get("epoch", {}).get("N", "0"))
            if stored > epoch:
                raise StaleEpochError(
                    f"{self.name}: key {record.partition_key!r} was written by epoch {stored} of {shard_id}; "
                    f"this worker holds epoch {epoch}"
                ) from exc
            return Write(record.partition_key, accepted=False, stored_epoch=stored)
        return Write(record.partition_key, accepted=True)
