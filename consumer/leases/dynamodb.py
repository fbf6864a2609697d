"""DynamoDB lease repository: each method is one conditional write or one transaction."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from consumer.clock import Clock, SystemClock
from consumer.dynamo import DynamoCalls, from_item, to_item, translate_errors
from consumer.errors import LeaseConflictError, WorkerFencedError
from consumer.leases.model import Lease, LeaseState, WorkerItem, lease_key, worker_key
from consumer.leases.repository import OwnerObservation, TableSnapshot
from consumer.records import Position

__all__ = ["DynamoDBLeaseRepository"]


def _lease_from(d: dict[str, Any]) -> Lease:
    return Lease(
        stream=d["stream"],
        shard_id=d["shard_id"],
        owner=d.get("owner"),
        epoch=int(d.get("epoch", 0)),
        state=LeaseState(d.get("state", "ACTIVE")),
        parents=tuple(d.get("parents", ())),
        handoff_to=d.get("handoff_to"),
        handoff_requested_ms=int(d["handoff_requested_ms"]) if "handoff_requested_ms" in d else None,
        halted_at=d.get("halted_at"),
        halted_since_ms=int(d["halted_since_ms"]) if "halted_since_ms" in d else None,
    )


def _worker_from(d: dict[str, Any]) -> WorkerItem:
    return WorkerItem(
        worker_id=d["worker_id"],
        heartbeat=int(d.get("heartbeat", 0)),
        generation=int(d.get("generation", 0)),
        inbox=int(d.get("inbox", 0)),
        draining=bool(d.get("draining", False)),
        lease_count=int(d.get("lease_count", 0)),
        started_ms=int(d.get("started_ms", 0)),
        heartbeat_ms=int(d.get("heartbeat_ms", 0)),
        drain_requested=bool(d.get("drain_requested", False)),
    )


# Attributes that describe one ownership and so go when the owner changes.
_PER_OWNERSHIP = "handoff_to, handoff_requested_ms, halted_at, halted_since_ms"


def _owned_condition(lease: Lease) -> tuple[str, dict[str, Any]]:
    """The lease is exactly as we last saw it: same epoch and same owner (or still no owner)."""
    values: dict[str, Any] = {":epoch": lease.epoch}
    if lease.owner is None:
        return "epoch = :epoch AND attribute_not_exists(#owner)", values
    values[":owner"] = lease.owner
    return "epoch = :epoch AND #owner = :owner", values


class DynamoDBLeaseRepository:
    def __init__(
        self, client: Any, lease_table: str, checkpoint_table: str, clock: Clock | None = None
    ) -> None:
        self._c = client
        self._clock = clock or SystemClock()  # stamps the operator-facing wall times only
        self.table = lease_table
        self.checkpoint_table = checkpoint_table
        self.calls = DynamoCalls()

    # -- reads -----------------------------------------------------------------------------------
    def snapshot(self) -> TableSnapshot:
        leases: list[Lease] = []
        workers: list[WorkerItem] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": True}
        with translate_errors(self.table, "scan"):
            while True:
                self.calls.add("Scan")
                page = self._c.scan(**kwargs)
                for raw in page.get("Items", []):
                    d = from_item(raw)
                    if d.get("item_type") == "worker":
                        workers.append(_worker_from(d))
                    elif d.get("item_type") == "lease":
                        leases.append(_lease_from(d))
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return TableSnapshot(tuple(leases), tuple(workers))

    def get_worker(self, worker_id: str) -> WorkerItem | None:
        self.calls.add("GetItem")
        with translate_errors(self.table, "get worker"):
            out = self._c.get_item(
                TableName=self.table, Key=to_item({"lease_key": worker_key(worker_id)}), ConsistentRead=True
            )
        return _worker_from(from_item(out["Item"])) if "Item" in out else None

    # -- membership ------------------------------------------------------------------------------
    def register_worker(self, worker: WorkerItem) -> None:
        self.calls.add("PutItem")
        item = {
            "lease_key": worker.key,
            "item_type": "worker",
            "worker_id": worker.worker_id,
            "heartbeat": 0,
            "generation": 0,
            "inbox": 0,
            "draining": False,
            "lease_count": 0,
            "started_ms": worker.started_ms,
        }
        with translate_errors(self.table, f"register {worker.worker_id}"):
            self._c.put_item(
                TableName=self.table,
                Item=to_item(item),
                ConditionExpression="attribute_not_exists(lease_key)",  # worker ids are never reused
            )

    def heartbeat(self, worker_id: str, generation: int, lease_count: int, draining: bool) -> int:
        self.calls.add("UpdateItem")
        try:
            with translate_errors(self.table, f"heartbeat {worker_id}"):
                out = self._c.update_item(
                    TableName=self.table,
                    Key=to_item({"lease_key": worker_key(worker_id)}),
                    UpdateExpression=(
                        "SET heartbeat = heartbeat + :one, lease_count = :n, draining = :d, heartbeat_ms = :now"
                    ),
                    # Nobody took one of our leases since we last reconciled (takers bump the generation).
                    ConditionExpression="generation = :g",
                    ExpressionAttributeValues=to_item(
                        {
                            ":one": 1,
                            ":n": lease_count,
                            ":d": draining,
                            ":g": generation,
                            ":now": self._clock.wall_ms(),
                        }
                    ),
                    ReturnValues="UPDATED_NEW",
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
        with translate_errors(self.table, f"forget {worker.worker_id}"):
            self._c.delete_item(
                TableName=self.table,
                Key=to_item({"lease_key": worker.key}),
                # Still silent (the heartbeat we saw) and nobody fenced it since (the generation we saw).
                ConditionExpression="heartbeat = :hb AND generation = :g",
                ExpressionAttributeValues=to_item({":hb": worker.heartbeat, ":g": worker.generation}),
            )

    # -- leases ----------------------------------------------------------------------------------
    def create_lease(self, lease: Lease) -> bool:
        self.calls.add("PutItem")
        item = {
            "lease_key": lease.key,
            "item_type": "lease",
            "stream": lease.stream,
            "shard_id": lease.shard_id,
            "epoch": lease.epoch,
            "state": lease.state.value,
            "parents": list(lease.parents),
        }
        try:
            with translate_errors(self.table, f"create {lease.key}"):
                self._c.put_item(
                    TableName=self.table,
                    Item=to_item(item),
                    ConditionExpression="attribute_not_exists(lease_key)",  # another worker may race us
                )
        except LeaseConflictError:
            return False
        return True

    def _ownership_change(
        self,
        lease: Lease,
        owner: str | None,
        extra: list[dict[str, Any]],
        checkpoint: Position | None = None,
    ) -> Lease:
        """One transaction: lease owner+epoch move, checkpoint epoch follows, plus ``extra`` items.

        ``checkpoint`` (operator replay) also sets the checkpoint's position, with no forward-only
        condition: moving back is the point of a replay."""
        cond, values = _owned_condition(lease)
        new_epoch = lease.epoch + 1
        values[":new"] = new_epoch
        names = {"#owner": "owner"}
        if owner is None:
            update = f"SET epoch = :new REMOVE #owner, {_PER_OWNERSHIP}"
        else:
            update = f"SET epoch = :new, #owner = :to REMOVE {_PER_OWNERSHIP}"
            values[":to"] = owner
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": to_item({"lease_key": lease.key}),
                    "UpdateExpression": update,
                    # Unchanged since we read it, and not ended.
                    "ConditionExpression": f"{cond} AND #state = :active",
                    "ExpressionAttributeNames": {**names, "#state": "state"},
                    "ExpressionAttributeValues": to_item({**values, ":active": "ACTIVE"}),
                }
            },
            self._checkpoint_follows(lease, new_epoch, checkpoint),
            *extra,
        ]
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"ownership change of {lease.key}"):
            self._c.transact_write_items(TransactItems=items)
        return Lease(
            stream=lease.stream,
            shard_id=lease.shard_id,
            owner=owner,
            epoch=new_epoch,
            state=lease.state,
            parents=lease.parents,
        )

    def _checkpoint_follows(self, lease: Lease, new_epoch: int, position: Position | None) -> dict[str, Any]:
        update = "SET epoch = :new, #stream = :s, shard_id = :sh"
        names = {"#stream": "stream"}
        values: dict[str, Any] = {
            ":new": new_epoch,
            ":old": lease.epoch,
            ":s": lease.stream,
            ":sh": lease.shard_id,
        }
        if position is not None:
            update += ", #seq = :seq, sub_sequence = :sub, position_key = :pk, updated_ms = :now"
            names["#seq"] = "sequence"
            values.update(
                {
                    ":seq": position.sequence,
                    ":sub": position.sub_sequence,
                    ":pk": position.sort_key(),
                    ":now": self._clock.wall_ms(),
                }
            )
        return {
            "Update": {
                "TableName": self.checkpoint_table,
                "Key": to_item({"lease_key": lease.key}),
                "UpdateExpression": update,
                # The checkpoint's epoch always mirrors the lease's: from now on only the new owner's
                # writes pass.
                "ConditionExpression": "attribute_not_exists(epoch) OR epoch = :old",
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": to_item(values),
            }
        }

    def _wake(self, worker_id: str, *, taking: bool = False) -> dict[str, Any]:
        """Bump a worker's inbox; ``taking``: only if it is registered and not draining (it will start what
        it is given)."""
        values: dict[str, Any] = {":one": 1}
        condition = "attribute_exists(lease_key)"  # the worker is registered
        if taking:
            condition += " AND draining = :false"  # and not shutting down: it would not start the lease
            values[":false"] = False
        return {
            "Update": {
                "TableName": self.table,
                "Key": to_item({"lease_key": worker_key(worker_id)}),
                "UpdateExpression": "SET inbox = inbox + :one",
                "ConditionExpression": condition,
                "ExpressionAttributeValues": to_item(values),
            }
        }

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        extra: list[dict[str, Any]] = []
        if dead_owner is not None:
            key = to_item({"lease_key": worker_key(dead_owner.worker_id)})
            if dead_owner.heartbeat is None:
                # Its worker item was gone for a whole lease duration; it must still be gone.
                extra.append(
                    {
                        "ConditionCheck": {
                            "TableName": self.table,
                            "Key": key,
                            "ConditionExpression": "attribute_not_exists(lease_key)",
                        }
                    }
                )
            else:
                # Its heartbeat did not move for a whole lease duration and still has not; fence it
                # by bumping its generation, so a heartbeat it sends late fails.
                extra.append(
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": key,
                            "UpdateExpression": "SET generation = generation + :one",
                            "ConditionExpression": "heartbeat = :hb",
                            "ExpressionAttributeValues": to_item({":one": 1, ":hb": dead_owner.heartbeat}),
                        }
                    }
                )
        return self._ownership_change(lease, new_owner, extra)

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        return self._ownership_change(lease, to_worker, [self._wake(to_worker, taking=True)])

    def release(self, lease: Lease) -> Lease:
        return self._ownership_change(lease, None, [])

    def _update_owned(self, lease: Lease, update: str, values: dict[str, Any], what: str) -> Lease:
        """One conditional update of a lease we hold; returns the lease as stored after it."""
        cond, cvalues = _owned_condition(lease)
        self.calls.add("UpdateItem")
        with translate_errors(self.table, what):
            out = self._c.update_item(
                TableName=self.table,
                Key=to_item({"lease_key": lease.key}),
                UpdateExpression=update,
                ConditionExpression=cond,
                ExpressionAttributeNames={
                    k: v for k, v in (("#owner", "owner"), ("#state", "state")) if k in update + cond
                },
                ExpressionAttributeValues=to_item({**cvalues, **values}),
                ReturnValues="ALL_NEW",
            )
        return _lease_from(from_item(out["Attributes"]))

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        if lease.owner is None:
            raise LeaseConflictError(f"{lease.key} has no owner to ask")
        cond, values = _owned_condition(lease)
        values.update({":req": requester, ":now": now_ms})
        items = [
            {
                "Update": {
                    "TableName": self.table,
                    "Key": to_item({"lease_key": lease.key}),
                    "UpdateExpression": "SET handoff_to = :req, handoff_requested_ms = :now",
                    # Still the owner we asked, and nobody else asked first.
                    "ConditionExpression": f"{cond} AND attribute_not_exists(handoff_to)",
                    "ExpressionAttributeNames": {"#owner": "owner"},
                    "ExpressionAttributeValues": to_item(values),
                }
            },
            self._wake(lease.owner),
        ]
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"request hand-off of {lease.key}"):
            self._c.transact_write_items(TransactItems=items)
        return replace(lease, handoff_to=requester, handoff_requested_ms=now_ms)

    def clear_handoff(self, lease: Lease) -> Lease:
        return self._update_owned(lease, "REMOVE handoff_to, handoff_requested_ms", {}, f"clear {lease.key}")

    def mark_ended(self, lease: Lease) -> Lease:
        return self._update_owned(
            lease,
            "SET #state = :ended REMOVE handoff_to, handoff_requested_ms",
            {":ended": "ENDED"},
            f"end {lease.key}",
        )

    def mark_halted(self, lease: Lease, position: str, now_ms: int) -> Lease:
        return self._update_owned(
            lease,
            "SET halted_at = :at, halted_since_ms = :since",
            {":at": position, ":since": now_ms},
            f"halt {lease.key}",
        )

    def delete_lease(self, lease: Lease) -> None:
        key = to_item({"lease_key": lease_key(lease.stream, lease.shard_id)})
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"retire {lease.key}"):  # both items or neither
            self._c.transact_write_items(
                TransactItems=[
                    {"Delete": {"TableName": t, "Key": key}} for t in (self.table, self.checkpoint_table)
                ]
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

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        return self._ownership_change(lease, None, [], checkpoint=position)
