"""DynamoDB items of the fleet: each worker's item (membership, its inbox, the operator's drain request) and
the leader item. Part of :class:`~consumer.leases.dynamodb.DynamoDBLeaseRepository`; each method is one
conditional write or one transaction."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consumer.clock import Clock
from consumer.dynamo import DynamoCalls, from_item, to_item, translate_errors
from consumer.errors import LeaseConflictError, WorkerFencedError
from consumer.leases.dynamodb_items import (
    fence_dead,
    same_incarnation,
    wake,
    worker_from,
)
from consumer.leases.model import LEADER_KEY, Leader, WorkerItem, worker_key
from consumer.leases.progress import ShardLag, encode_progress
from consumer.leases.repository import OwnerObservation

__all__ = ["DynamoDBMembers"]


class DynamoDBMembers:
    """The worker and leader items of the lease table (``MembershipRepository``, ``LeadershipRepository``
    and the drain request of ``AdminRepository``)."""

    _c: Any  # the boto3 DynamoDB client
    _clock: Clock  # stamps the operator-facing wall times only
    table: str
    calls: DynamoCalls

    def _get(self, key: str, consistent: bool, what: str) -> dict[str, Any] | None:
        self.calls.add("GetItem")
        with translate_errors(self.table, what):
            out = self._c.get_item(
                TableName=self.table, Key=to_item({"lease_key": key}), ConsistentRead=consistent
            )
        return from_item(out["Item"]) if "Item" in out else None

    def get_worker(self, worker_id: str, consistent: bool = True) -> WorkerItem | None:
        d = self._get(worker_key(worker_id), consistent, f"get worker {worker_id}")
        return worker_from(d) if d is not None else None

    def register_worker(self, worker: WorkerItem) -> None:
        self.calls.add("PutItem")
        item = {
            "lease_key": worker.key,
            "item_type": "worker",
            "worker_id": worker.worker_id,
            "heartbeat": 0,
            "incarnation": worker.incarnation,
            "generation": 0,
            "inbox": 0,
            "draining": False,
            "lease_count": 0,
            "started_ms": worker.started_ms,
            "streams": sorted(worker.streams),
            "lease_duration_ms": worker.lease_duration_ms or None,  # None: not written
        }
        with translate_errors(self.table, f"register {worker.worker_id}"):
            self._c.put_item(
                TableName=self.table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(lease_key)",  # worker ids are never reused
            )

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: Mapping[tuple[str, str], ShardLag] | None = None,
        gone: frozenset[str] = frozenset(),
    ) -> int:
        self.calls.add("UpdateItem")
        update = "SET heartbeat = heartbeat + :one, lease_count = :n, draining = :d, heartbeat_ms = :now"
        values: dict[str, Any] = {
            ":one": 1,
            ":n": lease_count,
            ":d": draining,
            ":g": generation,
            ":now": self._clock.wall_ms(),
        }
        names: dict[str, str] = {}
        removes: list[str] = []
        if progress is not None:  # in the same write: no request of its own (docs/protocol.md)
            blob = encode_progress(progress)
            names["#progress"] = "progress"
            if blob:
                update += ", #progress = :progress"
                values[":progress"] = blob
            else:
                removes.append("#progress")
        if gone:  # a string set: DynamoDB stores no empty one, so none is removed
            update += ", gone_streams = :gone"
            values[":gone"] = set(gone)
        else:
            removes.append("gone_streams")
        update += f" REMOVE {', '.join(removes)}" if removes else ""
        extra: dict[str, Any] = {"ExpressionAttributeNames": names} if names else {}
        try:
            with translate_errors(self.table, f"heartbeat {worker_id}"):
                out = self._c.update_item(
                    TableName=self.table,
                    Key=to_item({"lease_key": worker_key(worker_id)}),
                    UpdateExpression=update,
                    # Nobody took one of our leases since we last reconciled (takers bump the generation).
                    ConditionExpression="generation = :g",
                    ExpressionAttributeValues=to_item(values),
                    ReturnValues="UPDATED_NEW",
                    **extra,
                )
        except LeaseConflictError as exc:
            raise WorkerFencedError(f"worker {worker_id}: generation moved past {generation}") from exc
        return int(from_item(out["Attributes"])["heartbeat"])

    def deregister_worker(self, worker_id: str) -> None:
        self.calls.add("DeleteItem")
        with translate_errors(self.table, f"deregister {worker_id}"):
            self._c.delete_item(TableName=self.table, Key=to_item({"lease_key": worker_key(worker_id)}))

    def forget_worker(self, worker: WorkerItem) -> None:
        self.calls.add("DeleteItem")
        same = same_incarnation(worker.incarnation)
        with translate_errors(self.table, f"forget {worker.worker_id}"):
            self._c.delete_item(
                TableName=self.table,
                Key=to_item({"lease_key": worker.key}),
                # Still silent (the heartbeat we saw, in the incarnation we saw) and nobody fenced it since
                # (the generation we saw).
                ConditionExpression=f"heartbeat = :hb AND generation = :g AND {same[0]}",
                ExpressionAttributeValues=to_item(
                    {":hb": worker.heartbeat, ":g": worker.generation, **same[1]}
                ),
            )

    def wake(self, worker_id: str) -> None:
        self.calls.add("UpdateItem")
        with translate_errors(self.table, f"wake {worker_id}"):
            self._c.update_item(**wake(self.table, worker_id)["Update"])

    def ack_given(self, worker_id: str, keys: frozenset[str]) -> None:
        self.calls.add("UpdateItem")
        with translate_errors(self.table, f"ack given to {worker_id}"):
            self._c.update_item(
                TableName=self.table,
                Key=to_item({"lease_key": worker_key(worker_id)}),
                UpdateExpression="DELETE given :keys",
                ConditionExpression="attribute_exists(lease_key)",  # never create a stray item
                ExpressionAttributeValues=to_item({":keys": set(keys)}),
            )

    def request_drain(self, worker_id: str) -> None:
        self.calls.add("UpdateItem")
        with translate_errors(self.table, f"drain {worker_id}"):
            self._c.update_item(
                TableName=self.table,
                Key=to_item({"lease_key": worker_key(worker_id)}),
                UpdateExpression="SET drain_requested = :t, inbox = inbox + :one",
                ConditionExpression="attribute_exists(lease_key)",  # a registered worker
                ExpressionAttributeValues=to_item({":t": True, ":one": 1}),
            )

    def get_leader(self) -> Leader | None:
        d = self._get(LEADER_KEY, False, "get leader")
        return Leader(d.get("owner"), int(d.get("epoch", 0))) if d is not None else None

    def claim_leader(self, seen: Leader | None, me: str, dead: OwnerObservation | None) -> Leader:
        epoch = 0 if seen is None else seen.epoch
        values: dict[str, Any] = {}
        if seen is None:
            cond = "attribute_not_exists(lease_key)"
        elif seen.owner is None:
            cond, values = "epoch = :e AND attribute_not_exists(#owner)", {":e": epoch}
        else:
            cond, values = "epoch = :e AND #owner = :old", {":e": epoch, ":old": seen.owner}
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": to_item(
                        {"lease_key": LEADER_KEY, "item_type": "leader", "owner": me, "epoch": epoch + 1}
                    ),
                    "ConditionExpression": cond,
                    **({"ExpressionAttributeNames": {"#owner": "owner"}} if seen is not None else {}),
                    **({"ExpressionAttributeValues": to_item(values)} if values else {}),
                }
            }
        ]
        if dead is not None:
            items.append(fence_dead(self.table, dead))
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"claim leadership for {me}"):
            self._c.transact_write_items(TransactItems=items)
        return Leader(me, epoch + 1)

    def resign_leader(self, leader: Leader) -> None:
        self.calls.add("UpdateItem")
        with translate_errors(self.table, f"resign leadership of {leader.owner}"):
            self._c.update_item(
                TableName=self.table,
                Key=to_item({"lease_key": LEADER_KEY}),
                UpdateExpression="SET epoch = :new REMOVE #owner",
                ConditionExpression="epoch = :e AND #owner = :me",
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues=to_item(
                    {":new": leader.epoch + 1, ":e": leader.epoch, ":me": leader.owner}
                ),
            )
