"""The lease table's writes that discovery makes: a lease created for a new shard, a lease retired with its
checkpoint, a lease restarted for a re-created stream's shard of the same id.

:class:`consumer.leases.dynamodb.DynamoDBLeaseRepository` extends this class (``DiscoveryRepository``)."""

from __future__ import annotations

from consumer.dynamo import to_item, translate_errors
from consumer.errors import LeaseConflictError
from consumer.leases.dynamodb_items import PER_OWNERSHIP, lease_item, owned_condition, wake
from consumer.leases.dynamodb_members import DynamoDBMembers
from consumer.leases.model import Lease, lease_key

__all__ = ["DynamoDBDiscoveryWrites"]


class DynamoDBDiscoveryWrites(DynamoDBMembers):
    """Discovery's writes to the lease table and the checkpoint table (``DiscoveryRepository``)."""

    checkpoint_table: str

    def create_lease(self, lease: Lease) -> bool:
        self.calls.add("PutItem")
        try:
            with translate_errors(self.table, f"create {lease.key}"):
                self._c.put_item(
                    TableName=self.table,
                    Item=to_item(lease_item(lease)),
                    ConditionExpression="attribute_not_exists(lease_key)",  # another worker may race us
                )
        except LeaseConflictError:
            return False
        return True

    def delete_lease(self, lease: Lease) -> None:
        key = to_item({"lease_key": lease_key(lease.stream, lease.shard_id)})
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"retire {lease.key}", self.checkpoint_table):  # both or neither
            self._c.transact_write_items(
                TransactItems=[
                    {"Delete": {"TableName": t, "Key": key}} for t in (self.table, self.checkpoint_table)
                ]
            )

    def restart_lease(self, seen: Lease, fresh: Lease) -> Lease:
        cond, values = owned_condition(seen)
        new = seen.restarted_as(fresh)
        values.update({":new": new.epoch, ":st": new.state.value, ":parents": list(new.parents)})
        sets = ["epoch = :new", "#state = :st", "parents = :parents"]
        removes = ["#owner", PER_OWNERSHIP]
        optional = {
            "skipped": True if new.skipped else None,
            "first_sequence": new.first_sequence,
            "latest_ms": new.latest_ms,
        }
        for name, value in optional.items():
            if value is None:
                removes.append(name)
            else:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value
        checkpoint = {
            "lease_key": seen.key,
            "stream": seen.stream,
            "shard_id": seen.shard_id,
            "epoch": new.epoch,
        }
        self.calls.add("TransactWriteItems")
        with translate_errors(self.table, f"restart of {seen.key}", self.checkpoint_table):
            self._c.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table,
                            "Key": to_item({"lease_key": seen.key}),
                            "UpdateExpression": f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                            "ConditionExpression": cond,
                            "ExpressionAttributeNames": {"#owner": "owner", "#state": "state"},
                            "ExpressionAttributeValues": to_item(values),
                        }
                    },
                    {"Put": {"TableName": self.checkpoint_table, "Item": to_item(checkpoint)}},
                ]
            )
        self._wake_old_owner(seen)
        return new

    def _wake_old_owner(self, lease: Lease) -> None:
        """Wake a lease's owner after the lease was taken from it, so that it drops it now, not at its next
        write (nothing to do when it is gone)."""
        if lease.owner is None:
            return
        self.calls.add("UpdateItem")
        try:
            with translate_errors(self.table, f"wake {lease.owner}"):
                self._c.update_item(**wake(self.table, lease.owner)["Update"])
        except LeaseConflictError:
            pass  # it is gone: nothing to wake
