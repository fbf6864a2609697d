"""Reading a KCL 2.x/3.x lease table (the schema AWS documents) into plain values.

One item per shard lease, hash key ``leaseKey``: the shard id for a single-stream application, or
``account:streamName:creationEpoch:shardId`` for a multi-stream one (the creation epoch, in seconds, tells a
stream from a former one of the same name: the KCL keeps a deleted stream's leases). ``checkpoint`` is a sequence number or
one of the sentinels ``TRIM_HORIZON``, ``LATEST``, ``AT_TIMESTAMP`` (no record processed yet) and
``SHARD_END`` (the shard is finished); ``checkpointSubSequenceNumber`` is the KPL sub-record within it;
``parentShardIds`` (a string set); ``leaseOwner`` and ``leaseCounter`` (bumped by the owner at every renewal,
so a counter that moves means a KCL worker is alive). KCL 3.x adds attributes (``checkpointOwner``,
``throughputKBps``, ...) that the cut-over does not need.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from consumer.aws_errors import aws_call
from consumer.dynamo import from_item
from consumer.errors import ConfigError, ConsumerError

__all__ = ["SENTINELS", "KclLease", "LiveKclFleetError", "check_not_alive", "read_kcl_leases"]

SENTINELS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP", "SHARD_END")


class LiveKclFleetError(ConsumerError):
    """A KCL worker still renews leases in the table: importing now would race it."""


@dataclass(frozen=True)
class KclLease:
    """One KCL lease: which shard, where its checkpoint is, its parents and who held it."""

    lease_key: str
    stream: str
    shard_id: str
    checkpoint: str  # a sequence number or one of SENTINELS
    sub_sequence: int
    parents: tuple[str, ...]
    owner: str | None
    counter: int
    pending_checkpoint: str | None = None
    creation_epoch: int | None = None  # a multi-stream key's creationEpoch (epoch seconds)
    # Its shard's StartingSequenceNumber in the stream as it is now (``check_streams`` sets it; the lease an
    # import creates records it, as discovery's do, so that a stream created again is told apart).
    first_sequence: str | None = None

    @property
    def sentinel(self) -> str | None:
        """The sentinel, or None for a sequence number."""
        return self.checkpoint if self.checkpoint in SENTINELS else None


def _scan(ddb: Any, table: str) -> Iterator[dict[str, Any]]:
    kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
    while True:
        with aws_call("dynamodb", f"scan the KCL lease table {table}"):
            out = ddb.scan(**kwargs)
        yield from (from_item(i) for i in out.get("Items", []))
        if "LastEvaluatedKey" not in out:
            return
        kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]


def _count(item: dict[str, Any], attribute: str, key: str) -> int:
    """A whole-number attribute of a KCL lease (0 when absent); anything else names the lease and attribute."""
    text = str(item.get(attribute, 0)).strip()
    if not text.isdigit():
        raise ConfigError(
            "--kcl-table",
            f"lease {key}: {attribute} {text!r} is not a whole number >= 0 (not a KCL lease table?)",
        )
    return int(text)


def _shard_id(value: str) -> str:
    return value.rsplit(":", 1)[-1]  # a multi-stream parent may be named by its whole lease key


def read_kcl_leases(ddb: Any, table: str, stream: str | None) -> list[KclLease]:
    """Every lease of ``table``; single-stream keys belong to ``stream`` (``--stream``), multi-stream keys
    name their own (and, with ``stream`` given, only that stream's are kept)."""
    out = []
    for item in _scan(ddb, table):
        key = str(item.get("leaseKey", ""))
        if not key:
            raise ConfigError("--kcl-table", f"{table} has an item without leaseKey: not a KCL lease table")
        parts = key.split(":")
        epoch: int | None = None
        if len(parts) == 4:  # account:stream:creationEpoch:shardId
            item_stream, shard = parts[1], parts[3]
            if stream is not None and item_stream != stream:
                continue
            if not parts[2].isdigit():
                raise ConfigError(
                    "--kcl-table",
                    f"lease key {key!r}: creationEpoch {parts[2]!r} is not a whole number of epoch seconds",
                )
            epoch = int(parts[2])
        elif len(parts) == 1:
            if stream is None:
                raise ConfigError("--stream", f"is required: {table} holds single-stream leases ({key})")
            item_stream, shard = stream, key
        else:
            raise ConfigError(
                "--kcl-table", f"lease key {key!r} is neither a shard id nor account:stream:epoch:shard"
            )
        checkpoint = str(item.get("checkpoint", ""))
        if checkpoint not in SENTINELS and not checkpoint.isdigit():
            raise ConfigError(
                "--kcl-table", f"lease {key}: checkpoint {checkpoint!r} is not a sequence number"
            )
        out.append(
            KclLease(
                lease_key=key,
                stream=item_stream,
                shard_id=shard,
                checkpoint=checkpoint,
                sub_sequence=_count(item, "checkpointSubSequenceNumber", key),
                parents=tuple(sorted(_shard_id(str(p)) for p in item.get("parentShardIds", ()) or ())),
                owner=str(item["leaseOwner"]) if item.get("leaseOwner") else None,
                counter=_count(item, "leaseCounter", key),
                pending_checkpoint=str(item["pendingCheckpoint"]) if item.get("pendingCheckpoint") else None,
                creation_epoch=epoch,
            )
        )
    return out


def check_not_alive(
    read: Callable[[], list[KclLease]], failover_seconds: float, sleep: Callable[[float], None] = time.sleep
) -> list[KclLease]:
    """Read twice, a failover time apart; ``LiveKclFleetError`` when an owned lease's counter moved.
    Returns the second reading."""
    before = {lease.lease_key: lease.counter for lease in read()}
    sleep(failover_seconds)
    after = read()
    for lease in after:
        if lease.owner is not None and lease.lease_key in before and lease.counter != before[lease.lease_key]:
            raise LiveKclFleetError(
                f"refusing to import: the KCL fleet is alive (lease {lease.lease_key} of {lease.owner}: "
                f"leaseCounter {before[lease.lease_key]} -> {lease.counter} within {failover_seconds:g}s); "
                "stop the KCL application first, or give --force"
            )
    return after
