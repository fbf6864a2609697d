"""The demo's checks of dev's processor (``examples/latest-per-key``, each key's newest record fenced by epoch):
its table against what was produced, the writes it refused, and one probe of its fence after the run."""

from __future__ import annotations

import contextlib
import json
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from consumer.records import Record

__all__ = ["count_refusals", "create_table", "probe_stale_epoch", "scan_items", "table_check"]


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
    pages = ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def _stored(item: Mapping[str, Any]) -> tuple[str, int, bytes]:
    """(shard, sequence number, data) of the record an item holds (``pos`` is ``<sequence>.<sub-sequence>``)."""
    return item["shard"]["S"], int(item["pos"]["S"].split(".")[0]), item["data"]["B"]


def table_check(
    items: Iterable[Mapping[str, Any]], produced: Sequence[tuple[str, str, str, bytes]], partition_key: str
) -> dict[str, Any]:
    """The table against the producer's ``(shard, sequence number, partition key, data)``: every key produced
    has one item, holding that key's newest record."""
    newest: dict[str, tuple[str, int, bytes]] = {}
    shards_of: dict[str, set[str]] = defaultdict(set)
    for shard, seq, key, data in produced:
        shards_of[key].add(shard)
        if key not in newest or int(seq) > newest[key][1]:
            newest[key] = (shard, int(seq), data)
    stored = {str(i[partition_key]["S"]): i for i in items}
    missing, unexpected = newest.keys() - stored.keys(), stored.keys() - newest.keys()
    not_newest = sorted(k for k in newest.keys() & stored.keys() if _stored(stored[k]) != newest[k])
    return {
        "records_produced": len(produced),
        "keys_produced": len(newest),
        "keys_on_more_than_one_shard": sum(len(s) > 1 for s in shards_of.values()),
        "rows": len(stored),
        "missing_keys": len(missing),
        "unexpected_keys": len(unexpected),
        "not_newest": len(not_newest),
        "each_key_newest": not missing and not unexpected and not not_newest and bool(newest),
    }


def count_refusals(logs: Iterable[Path], crash_at: float, crash_shards: Collection[str]) -> dict[str, int]:
    """The refused writes in the workers' JSON logs: the example's ``latest_refused`` (older than the record
    stored, a no-op; ``older_after_crash``: on ``crash_shards`` from ``crash_at`` on) and
    ``demo_processor_lease_lost`` of a ``StaleEpochError`` (a newer epoch had written)."""
    older = stale = after_crash = 0
    for path in logs:
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if '"latest_refused"' not in line and '"demo_processor_lease_lost"' not in line:
                continue
            with contextlib.suppress(ValueError):  # a line cut short by SIGKILL
                e = json.loads(line)
                if e["event"] == "latest_refused":
                    older += e["refused"]
                    at = datetime.fromisoformat(e["ts"]).timestamp()
                    if at >= crash_at and e["shard"] in crash_shards:
                        after_crash += e["refused"]
                elif e["event"] == "demo_processor_lease_lost" and e["error_type"] == "StaleEpochError":
                    stale += 1
    return {"older_than_stored": older, "older_after_crash": after_crash, "stale_epoch": stale}


def probe_stale_epoch(
    ddb: Any, table: str, partition_key: str, items: list[dict[str, Any]]
) -> dict[str, Any]:
    """The example's upsert of a later record as the previous epoch of the first item's shard (a paused,
    replaced owner) must raise ``StaleEpochError`` and change nothing."""
    from latest_per_key.table import FencedLatestTable, StaleEpochError

    if not items:
        return {"probed": False}
    item = min(items, key=lambda i: str(i[partition_key]["S"]))  # every item's epoch is 1 or more
    key, shard, epoch = item[partition_key]["S"], item["shard"]["S"], int(item["epoch"]["N"])
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
