"""DynamoDB lease repository: each method is one conditional write or one transaction.

The lease items and their checkpoints are here; discovery's writes in :mod:`consumer.leases.dynamodb_discovery`
and the worker and leader items in :mod:`consumer.leases.dynamodb_members`, which this class extends."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from consumer.clock import Clock, SystemClock
from consumer.dynamo import DynamoCalls, from_item, to_item, translate_errors
from consumer.errors import LeaseConflictError, ThrottledError
from consumer.leases.dynamodb_discovery import DynamoDBDiscoveryWrites
from consumer.leases.dynamodb_items import (
    PER_OWNER,
    PER_OWNERSHIP,
    fence_dead,
    lease_from,
    owned_condition,
    wake,
    worker_from,
)
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import OwnerObservation, TableSnapshot, check_release_all
from consumer.records import Position

__all__ = ["DynamoDBLeaseRepository"]

# BatchGetItem answers the keys of a throttled partition as UnprocessedKeys. Requests that serve none of them
# are sent again at once this many times, then the read is a throttle (``ThrottledError``) for the caller's
# retry policy to back off: never a tight loop of requests on the coordinator's thread.
_UNPROCESSED_ROUNDS = 3


class DynamoDBLeaseRepository(DynamoDBDiscoveryWrites):
    """The lease table and its checkpoints in DynamoDB (``LeaseRepository``)."""

    def __init__(
        self, client: Any, lease_table: str, checkpoint_table: str, clock: Clock | None = None
    ) -> None:
        self._c = client
        self._clock = clock or SystemClock()  # stamps the operator-facing wall times only
        self.table = lease_table
        self.checkpoint_table = checkpoint_table
        self.calls = DynamoCalls()

    def snapshot(self, consistent: bool = True) -> TableSnapshot:
        leases: list[Lease] = []
        workers: list[WorkerItem] = []
        kwargs: dict[str, Any] = {"TableName": self.table, "ConsistentRead": consistent}
        with translate_errors(self.table, "scan"):
            while True:
                self.calls.add("Scan")
                page = self._c.scan(**kwargs)
                for raw in page.get("Items", []):
                    d = from_item(raw)
                    if d.get("item_type") == "worker":
                        workers.append(worker_from(d))
                    elif d.get("item_type") == "lease":
                        leases.append(lease_from(d))
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return TableSnapshot(tuple(leases), tuple(workers))

    def get_leases(self, keys: tuple[str, ...]) -> tuple[Lease, ...]:
        out: list[Lease] = []
        todo = [to_item({"lease_key": k}) for k in dict.fromkeys(keys)]
        idle = 0  # requests in a row that read nothing
        with translate_errors(self.table, "get leases"):
            while todo:
                batch, todo = todo[:100], todo[100:]  # BatchGetItem's most keys a request
                self.calls.add("BatchGetItem")
                page = self._c.batch_get_item(
                    RequestItems={self.table: {"Keys": batch, "ConsistentRead": True}}
                )
                read = page.get("Responses", {}).get(self.table, [])
                out += [lease_from(from_item(r)) for r in read]
                unprocessed = page.get("UnprocessedKeys", {}).get(self.table, {}).get("Keys", [])
                idle = 0 if read or not unprocessed else idle + 1
                if idle >= _UNPROCESSED_ROUNDS:
                    raise ThrottledError(
                        f"get leases on {self.table}: BatchGetItem left {len(unprocessed) + len(todo)} keys "
                        f"unread (UnprocessedKeys) {idle} times in a row",
                        operation="BatchGetItem",
                    )
                todo = unprocessed + todo
        return tuple(out)

    def _ownership_change(
        self,
        lease: Lease,
        owner: str | None,
        extra: list[dict[str, Any]],
        checkpoint: Position | None = None,
        given_up_by: str | None = None,
    ) -> Lease:
        """One transaction: lease owner+epoch move, checkpoint epoch follows, plus ``extra`` items.

        ``checkpoint`` (operator replay) also sets the checkpoint's position, with no forward-only
        condition: moving back is the point of a replay."""
        items, new = self._ownership_items(lease, owner, checkpoint, given_up_by)
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"ownership change of {lease.key}", self.checkpoint_table):
            self._c.transact_write_items(TransactItems=[*items, *extra])
        return new

    def release_all(self, leases: Sequence[Lease]) -> tuple[Lease, ...]:
        check_release_all(leases)
        if not leases:
            return ()
        items: list[dict[str, Any]] = []
        released: list[Lease] = []
        for lease in leases:
            lease_items, new = self._ownership_items(lease, None, None, None)
            items += lease_items
            released.append(new)
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"release of {len(leases)} leases", self.checkpoint_table):
            self._c.transact_write_items(TransactItems=items)
        return tuple(released)

    def _ownership_items(
        self, lease: Lease, owner: str | None, checkpoint: Position | None, given_up_by: str | None
    ) -> tuple[list[dict[str, Any]], Lease]:
        """The two writes of an ownership change (the lease, its checkpoint's epoch) and the lease after it."""
        cond, values = owned_condition(lease)
        new_epoch = lease.epoch + 1
        values[":new"] = new_epoch
        names = {"#owner": "owner"}
        if given_up_by is not None:  # kept until the next owner: the leader offers it to others first
            update = f"SET epoch = :new, given_up_by = :by REMOVE #owner, {PER_OWNER}"
            values[":by"] = given_up_by
        elif owner is None:
            update = f"SET epoch = :new REMOVE #owner, {PER_OWNERSHIP}"
        else:
            update = f"SET epoch = :new, #owner = :to REMOVE {PER_OWNERSHIP}"
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
        ]
        return items, Lease(
            stream=lease.stream,
            shard_id=lease.shard_id,
            owner=owner,
            epoch=new_epoch,
            state=lease.state,
            parents=lease.parents,
            given_up_by=given_up_by,
            first_sequence=lease.first_sequence,
            latest_ms=lease.latest_ms,
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

    def take(self, lease: Lease, new_owner: str, dead_owner: OwnerObservation | None) -> Lease:
        """Own an unowned lease, or a dead owner's (its heartbeat still as observed; its generation bumped):
        ``assign`` without the inbox. No worker calls it (the leader assigns); the contract tests and the
        emulators' isolation proof set up and race ownership with it."""
        extra = [fence_dead(self.table, dead_owner)] if dead_owner is not None else []
        return self._ownership_change(lease, new_owner, extra)

    def assign(self, lease: Lease, to_worker: str, dead_owner: OwnerObservation | None) -> Lease:
        extra = [fence_dead(self.table, dead_owner)] if dead_owner is not None else []
        extra.append(wake(self.table, to_worker, taking=True, given=lease.key))
        return self._ownership_change(lease, to_worker, extra)

    def transfer(self, lease: Lease, to_worker: str) -> Lease:
        return self._ownership_change(
            lease, to_worker, [wake(self.table, to_worker, taking=True, given=lease.key)]
        )

    def release(self, lease: Lease, given_up: bool = False) -> Lease:
        return self._ownership_change(lease, None, [], given_up_by=lease.owner if given_up else None)

    def _update_owned(self, lease: Lease, update: str, values: dict[str, Any], what: str) -> Lease:
        """One conditional update of a lease we hold; returns the lease as stored after it."""
        cond, cvalues = owned_condition(lease)
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
        return lease_from(from_item(out["Attributes"]))

    def request_handoff(self, lease: Lease, requester: str, now_ms: int) -> Lease:
        if lease.owner is None:
            raise LeaseConflictError(f"{lease.key} has no owner to ask")
        cond, values = owned_condition(lease)
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
            wake(self.table, lease.owner),
            wake(self.table, requester, taking=True, expect=True),  # it polls fast, ready for the lease
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

    def reset_checkpoint(self, lease: Lease, position: Position) -> Lease:
        new = self._ownership_change(lease, None, [], checkpoint=position)
        self._wake_old_owner(lease)
        return new
