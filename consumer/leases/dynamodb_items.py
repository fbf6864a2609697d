"""How lease, worker and leader items look in DynamoDB, and the transaction items every change reuses."""

from __future__ import annotations

from typing import Any

from consumer.dynamo import to_item
from consumer.leases.model import Lease, LeaseState, WorkerItem, worker_key
from consumer.leases.repository import OwnerObservation

__all__ = [
    "PER_OWNER",
    "PER_OWNERSHIP",
    "fence_dead",
    "lease_from",
    "lease_item",
    "owned_condition",
    "same_incarnation",
    "wake",
    "worker_from",
]

#: Attributes that describe one ownership (a hand-off asked, a halt) and so go when the owner changes.
PER_OWNER = "handoff_to, handoff_requested_ms, halted_at, halted_since_ms"
#: ``PER_OWNER`` and who gave the lease up: what a change of owner removes, unless it records a give-up.
PER_OWNERSHIP = f"{PER_OWNER}, given_up_by"


def lease_item(lease: Lease) -> dict[str, Any]:
    """A new lease's item as it is created (discovery, ``import-kcl``): its creation fields, the optional ones
    only when set; ``lease_from`` reads it back."""
    item: dict[str, Any] = {
        "lease_key": lease.key,
        "item_type": "lease",
        "stream": lease.stream,
        "shard_id": lease.shard_id,
        "epoch": lease.epoch,
        "state": lease.state.value,
        "parents": list(lease.parents),
    }
    if lease.skipped:
        item["skipped"] = True
    if lease.first_sequence is not None:
        item["first_sequence"] = lease.first_sequence
    if lease.latest_ms is not None:
        item["latest_ms"] = lease.latest_ms
    return item


def lease_from(d: dict[str, Any]) -> Lease:
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
        given_up_by=d.get("given_up_by"),
        skipped=bool(d.get("skipped", False)),
        first_sequence=d.get("first_sequence"),
        latest_ms=int(d["latest_ms"]) if "latest_ms" in d else None,
    )


def worker_from(d: dict[str, Any]) -> WorkerItem:
    return WorkerItem(
        worker_id=d["worker_id"],
        heartbeat=int(d.get("heartbeat", 0)),
        incarnation=str(d.get("incarnation", "")),
        generation=int(d.get("generation", 0)),
        inbox=int(d.get("inbox", 0)),
        draining=bool(d.get("draining", False)),
        lease_count=int(d.get("lease_count", 0)),
        started_ms=int(d.get("started_ms", 0)),
        heartbeat_ms=int(d.get("heartbeat_ms", 0)),
        drain_requested=bool(d.get("drain_requested", False)),
        given=frozenset(d.get("given", ())),
        expect=int(d.get("expect", 0)),
        streams=frozenset(d.get("streams", ())),
        gone_streams=frozenset(d.get("gone_streams", ())),
        progress=_binary(d.get("progress")),
        lease_duration_ms=int(d.get("lease_duration_ms", 0)),
    )


def _binary(value: Any) -> bytes:
    """A binary attribute's bytes (boto3 deserializes it as ``Binary``); b"" when absent."""
    if value is None:
        return b""
    return bytes(getattr(value, "value", value))


def owned_condition(lease: Lease) -> tuple[str, dict[str, Any]]:
    """The lease is exactly as we last saw it: same epoch and same owner (or still no owner)."""
    values: dict[str, Any] = {":epoch": lease.epoch}
    if lease.owner is None:
        return "epoch = :epoch AND attribute_not_exists(#owner)", values
    values[":owner"] = lease.owner
    return "epoch = :epoch AND #owner = :owner", values


def wake(
    table: str, worker_id: str, *, taking: bool = False, given: str | None = None, expect: bool = False
) -> dict[str, Any]:
    """Bump a worker's inbox; ``taking``: only if it is registered and not draining (it will start what
    it is given); ``given``: the lease key it is given, added to its ``given`` set until it has read it;
    ``expect``: also bump its ``expect`` counter (a lease is on its way: poll fast)."""
    values: dict[str, Any] = {":one": 1}
    condition = "attribute_exists(lease_key)"  # the worker is registered
    if taking:
        condition += " AND draining = :false"  # and not shutting down: it would not start the lease
        values[":false"] = False
    update = "SET inbox = inbox + :one"
    adds = []
    if given is not None:
        adds.append("given :given")
        values[":given"] = {given}
    if expect:
        adds.append("expect :one")  # ADD starts a missing number at zero
    if adds:
        update += " ADD " + ", ".join(adds)
    return {
        "Update": {
            "TableName": table,
            "Key": to_item({"lease_key": worker_key(worker_id)}),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": to_item(values),
        }
    }


def fence_dead(table: str, dead: OwnerObservation) -> dict[str, Any]:
    """The transaction item that proves ``dead`` is still dead, and fences it if its item is there."""
    key = to_item({"lease_key": worker_key(dead.worker_id)})
    if dead.heartbeat is None:  # its worker item was gone for a whole lease duration; still gone
        return {
            "ConditionCheck": {
                "TableName": table,
                "Key": key,
                "ConditionExpression": "attribute_not_exists(lease_key)",
            }
        }
    # Its heartbeat did not move for a whole lease duration and still has not, in the same incarnation (a
    # worker registered again restarts its counter); fence it by bumping its generation, so a heartbeat it
    # sends late fails.
    condition, values = same_incarnation(dead.incarnation)
    return {
        "Update": {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "SET generation = generation + :one",
            "ConditionExpression": f"heartbeat = :hb AND {condition}",
            "ExpressionAttributeValues": to_item({":one": 1, ":hb": dead.heartbeat, **values}),
        }
    }


def same_incarnation(incarnation: str) -> tuple[str, dict[str, Any]]:
    """The worker item is still the incarnation seen ("" also matches an item from before incarnations)."""
    if not incarnation:
        return "(attribute_not_exists(incarnation) OR incarnation = :inc)", {":inc": ""}
    return "incarnation = :inc", {":inc": incarnation}
