"""DynamoDB checkpoint store: a write passes only with the current epoch and a position not behind."""

from __future__ import annotations

import time
from typing import Any

from botocore.exceptions import ClientError

from consumer.aws_errors import PROVIDER_FAILURES
from consumer.checkpoint.store import CheckpointItem
from consumer.dynamo import DynamoCalls, from_item, to_item, translate_errors
from consumer.errors import CheckpointRejectedError
from consumer.leases.model import lease_key
from consumer.records import Position

__all__ = ["DynamoDBCheckpointStore"]


def _position_from(d: dict[str, Any]) -> Position | None:
    if "sequence" not in d:
        return None
    return Position(str(d["sequence"]), int(d.get("sub_sequence", 0)))


class DynamoDBCheckpointStore:
    def __init__(self, client: Any, table: str) -> None:
        self._c = client
        self.table = table
        self.calls = DynamoCalls()

    def get(self, stream: str, shard_id: str) -> CheckpointItem | None:
        self.calls.add("GetItem")
        with translate_errors(self.table, f"read checkpoint {stream}/{shard_id}"):
            out = self._c.get_item(
                TableName=self.table,
                Key=to_item({"lease_key": lease_key(stream, shard_id)}),
                ConsistentRead=True,
            )
        if "Item" not in out:
            return None
        d = from_item(out["Item"])
        return CheckpointItem(
            stream, shard_id, int(d["epoch"]), _position_from(d), int(d.get("updated_ms", 0))
        )

    def save(self, stream: str, shard_id: str, epoch: int, position: Position) -> None:
        self.calls.add("UpdateItem")
        try:
            self._c.update_item(
                TableName=self.table,
                Key=to_item({"lease_key": lease_key(stream, shard_id)}),
                UpdateExpression="SET #seq = :seq, sub_sequence = :sub, position_key = :pk, updated_ms = :now",
                # Written by the current owner (the epoch mirrors the lease's) and never backwards:
                # position_key sorts like the (sequence, sub-sequence) order.
                ConditionExpression="epoch = :e AND (attribute_not_exists(position_key) OR position_key <= :pk)",
                ExpressionAttributeNames={"#seq": "sequence"},
                ExpressionAttributeValues=to_item(
                    {
                        ":seq": position.sequence,
                        ":sub": position.sub_sequence,
                        ":pk": position.sort_key(),
                        ":now": int(time.time() * 1000),
                        ":e": epoch,
                    }
                ),
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                with translate_errors(self.table, f"checkpoint {stream}/{shard_id}"):
                    raise
            old = from_item(exc.response.get("Item", {}))
            stale = int(old.get("epoch", -1)) != epoch
            reason = (
                f"epoch {epoch} is not current (now {old.get('epoch')})"
                if stale
                else f"{position} is behind the stored {_position_from(old)}"
            )
            raise CheckpointRejectedError(f"{stream}/{shard_id}: {reason}", stale_epoch=stale) from exc
        except PROVIDER_FAILURES:  # not the service's answer: the transport's, or botocore's own
            with translate_errors(self.table, f"checkpoint {stream}/{shard_id}"):
                raise
