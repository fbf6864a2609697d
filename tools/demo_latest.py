"""The example processor's side of the demo: its DynamoDB table, what the table holds, what was refused.

The dev environment deploys ``examples/latest-per-key``: besides the raw S3 sink it keeps the newest record
of every partition key in a table of its own, under a condition on the shard's ownership epoch and the
record's position. The demo creates that table as the state stack does (``cdk.json``:
``consumer.processor_table``), and afterwards

* compares the table with what the producer wrote: one item per key produced, each holding its key's newest
  record (the same shard, sequence number and bytes; the producer keeps every key on one shard);
* counts the writes the example refused, from the workers' log events: its own ``latest_refused`` (a record
  older than the one stored, e.g. redelivered after a crash; a no-op) and the demo wrapper's
  ``demo_processor_lease_lost`` for a ``StaleEpochError`` (a newer epoch of the shard had written the key:
  the writer had lost the shard);
* probes the fence once the fleet has stopped: the example's own upsert, as the previous epoch of a key's
  shard writing a later record, must be refused with ``StaleEpochError`` and leave the item as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from consumer.records import Record

__all__ = ["count_refusals", "create_table", "probe_stale_epoch", "scan_items", "table_check"]

_SHOWN = 5  # mismatches kept in the summary, for a look


def create_table(ddb: Any, name: str, partition_key: str) -> None:
    """The processor's table as the state stack defines it: a string partition key, on demand."""
    ddb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": partition_key, "AttributeType": "S"}],
        KeySchema=[{"AttributeName": partition_key, "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})


def scan_items(ddb: Any, name: str) -> list[dict[str, Any]]:
    """Every item of the table (one consistent scan)."""
    items: list[dict[str, Any]] = []
    for page in ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def table_check(
    items: Iterable[Mapping[str, Any]],
    produced: Iterable[tuple[str, str, str, bytes]],
    partition_key: str,
) -> dict[str, Any]:
    """The table against the producer's records ``(shard, sequence number, partition key, data)``: every key
    produced has one item, holding that key's newest record (same shard, sequence number and bytes)."""
    newest: dict[str, tuple[str, int, bytes]] = {}
    shards_of: dict[str, set[str]] = {}
    total = 0
    for shard, seq, key, data in produced:
        total += 1
        shards_of.setdefault(key, set()).add(shard)
        if key not in newest or int(seq) > newest[key][1]:
            newest[key] = (shard, int(seq), data)
    stored: dict[str, Mapping[str, Any]] = {str(i[partition_key]["S"]): i for i in items}
    missing = sorted(newest.keys() - stored.keys())
    unexpected = sorted(stored.keys() - newest.keys())
    not_newest: list[dict[str, Any]] = []
    epochs: dict[str, int] = {}
    for key in sorted(newest.keys() & stored.keys()):
        item, (shard, newest_seq, data) = stored[key], newest[key]
        epoch = item.get("epoch", {}).get("N", "?")
        epochs[epoch] = epochs.get(epoch, 0) + 1
        got_shard = item.get("shard", {}).get("S")
        got_seq = int(str(item.get("pos", {}).get("S", "-1")).split(".")[0] or -1)
        got_data = item.get("data", {}).get("B")
        if (got_shard, got_seq, got_data) != (shard, newest_seq, data):
            not_newest.append(
                {
                    "key": key,
                    "stored": [got_shard, str(got_seq)],
                    "newest": [shard, str(newest_seq)],
                    "epoch": epoch,
                }
            )
    return {
        "records_produced": total,
        "keys_produced": len(newest),
        "keys_on_more_than_one_shard": sum(len(s) > 1 for s in shards_of.values()),
        "rows": len(stored),
        "missing_keys": len(missing),
        "unexpected_keys": len(unexpected),
        "not_newest": len(not_newest),
        "not_newest_examples": not_newest[:_SHOWN],
        "rows_by_writer_epoch": dict(
            sorted(epochs.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else 0)
        ),
        "each_key_newest": not missing and not unexpected and not not_newest and bool(newest),
    }


def count_refusals(
    logs: Iterable[Path], crash_at: float | None = None, crash_shards: Iterable[str] = ()
) -> dict[str, int]:
    """The example's refused writes, from the workers' JSON log lines: its own ``latest_refused`` events
    (their ``refused`` counts: records older than the one stored, a no-op) and the demo wrapper's
    ``demo_processor_lease_lost`` events of type ``StaleEpochError`` (a newer epoch of the shard had written
    the key: the batch is not processed by this owner). ``older_after_crash``: the older-than-stored ones on
    ``crash_shards`` from ``crash_at`` (epoch seconds) on, i.e. by the successors of a SIGKILLed worker."""
    older = events = stale = after_crash = 0
    shards = set(crash_shards)
    for path in logs:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"latest_refused"' not in line and '"demo_processor_lease_lost"' not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            if e.get("event") == "latest_refused":
                events += 1
                older += int(e.get("refused", 0))
                at = datetime.fromisoformat(str(e.get("ts", "")).replace("Z", "+00:00")).timestamp()
                if crash_at is not None and at >= crash_at and e.get("shard") in shards:
                    after_crash += int(e.get("refused", 0))
            elif e.get("event") == "demo_processor_lease_lost" and e.get("error_type") == "StaleEpochError":
                stale += 1
    return {
        "older_than_stored": older,
        "older_after_crash": after_crash,
        "batches_with_refusals": events,
        "stale_epoch": stale,
    }


def probe_stale_epoch(
    ddb: Any, table: str, partition_key: str, items: list[dict[str, Any]]
) -> dict[str, Any]:
    """After the fleet stopped: the example's upsert as the previous epoch of an item's shard, with a later
    record than the one stored (what a paused, replaced owner would write), must raise ``StaleEpochError``
    and change nothing. Uses the first item (by key) written under an epoch above 0."""
    from latest_per_key.table import FencedLatestTable, StaleEpochError

    candidates = sorted(
        (i for i in items if int(i.get("epoch", {}).get("N", "0")) > 0), key=lambda i: i[partition_key]["S"]
    )
    if not candidates:
        return {"probed": False}
    item = candidates[0]
    key, shard = item[partition_key]["S"], item["shard"]["S"]
    epoch = int(item["epoch"]["N"])
    seq, _, sub = item["pos"]["S"].partition(".")
    later = Record(
        stream="probe",
        shard_id=shard,
        sequence_number=str(int(seq) + 1),
        sub_sequence_number=int(sub or 0),
        partition_key=key,
        data=b'{"probe": "stale epoch"}',
        approximate_arrival=datetime.now(UTC),
    )
    refused, error = False, ""
    try:
        FencedLatestTable(ddb, table).upsert(shard, epoch - 1, later)
    except StaleEpochError as exc:
        refused, error = True, str(exc)
    after = ddb.get_item(TableName=table, Key={partition_key: {"S": key}}, ConsistentRead=True).get("Item")
    return {
        "probed": True,
        "key": key,
        "shard": shard,
        "stored_epoch": epoch,
        "write_epoch": epoch - 1,
        "refused": refused,
        "error": error,
        "item_unchanged": after == item,
    }
