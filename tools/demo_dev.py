"""Dev's environment (``cdk.json``) as the demo runs it: local names, its processor
(``examples/latest-per-key``: each key's newest record, fenced by epoch) and the checks of its table.
CloudFormation names the tables, queue and buckets in AWS; locally they derive from the application name."""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from consumer.errors import ProcessorLoadError
from consumer.loader import load_processor
from consumer.records import Record
from stacks.config import EnvironmentSettings, load_environments
from tools.fleet.runner import Fleet

__all__ = ["Crash", "DemoNames", "DemoProcessor", "load_environment", "scan_items"]

_CDK_JSON: Final = Path(__file__).resolve().parents[1] / "cdk.json"


@dataclass(frozen=True)
class Crash:
    """The worker the demo SIGKILLed, when (epoch seconds), and the shards it was delivering then."""

    worker: str
    at: float
    shards: tuple[str, ...]


def load_environment(name: str = "dev") -> EnvironmentSettings:
    """The validated settings of environment ``name`` in ``cdk.json``."""
    environments = json.loads(_CDK_JSON.read_text(encoding="utf-8"))["context"]["environments"]
    return load_environments(environments)[name]


@dataclass(frozen=True)
class DemoNames:
    """Local resource names: the streams as configured, the rest derived from the application name."""

    application: str
    streams: tuple[str, ...]
    lease_table: str
    checkpoint_table: str
    dead_letter_queue: str
    raw_bucket: str
    curated_bucket: str
    raw_prefix: str
    processor_table: str

    @classmethod
    def of(cls, env: EnvironmentSettings) -> DemoNames:
        """The names for ``env``."""
        app = env.consumer.application
        return cls(
            application=app,
            streams=tuple(s.name for s in env.streams),
            lease_table=f"{app}-leases",
            checkpoint_table=f"{app}-checkpoints",
            dead_letter_queue=f"{app}-dlq",
            raw_bucket=f"{app.lower().replace('_', '-')}-raw",
            curated_bucket=f"{app.lower().replace('_', '-')}-curated",
            raw_prefix=env.consumer.raw_prefix,
            processor_table=f"{app}-processor",
        )


@dataclass(frozen=True)
class DemoProcessor:
    """The processor the environment deploys from its project folder, and its own table."""

    entry_point: str
    project: Path
    table: str
    table_variable: str
    partition_key: str

    @classmethod
    def of(cls, env: EnvironmentSettings, names: DemoNames) -> DemoProcessor:
        """``env``'s processor; like dev's, it must have a project and a table."""
        c, t = env.consumer, env.consumer.processor_table
        if c.processor_project is None or t is None:
            raise SystemExit(f"error: {env.name} has no processor_project or processor_table, as dev has")
        project = (_CDK_JSON.parent / c.processor_project).resolve()
        return cls(c.processor, project, names.processor_table, t.variable, t.partition_key)

    def check_importable(self) -> None:
        """Load the entry point as a worker will (the project's folder on the path), or exit with one line."""
        sys.path.insert(0, str(self.project))
        try:
            load_processor(self.entry_point)
        except ProcessorLoadError as exc:
            raise SystemExit(f"error: {exc}; run `make setup`") from exc

    def worker_env(self) -> dict[str, str]:
        """A worker's variables beyond the consumer's: ``DEMO_PROCESSOR``, the project on ``PYTHONPATH`` (as the
        image puts a project without a wheel) and the table's name in its variable (as the task definition)."""
        path = os.pathsep.join(p for p in (str(self.project), os.environ.get("PYTHONPATH", "")) if p)
        return {"DEMO_PROCESSOR": self.entry_point, "PYTHONPATH": path, self.table_variable: self.table}

    def create_table(self, ddb: Any) -> None:
        """The table as the state stack defines it: a string partition key, on demand."""
        ddb.create_table(
            TableName=self.table,
            AttributeDefinitions=[{"AttributeName": self.partition_key, "AttributeType": "S"}],
            KeySchema=[{"AttributeName": self.partition_key, "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        ddb.get_waiter("table_exists").wait(
            TableName=self.table, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100}
        )

    def check(self, ddb: Any, fleet: Fleet, crash: Crash) -> dict[str, Any]:
        """Its table against the producer's records, the writes it refused and one probe of its fence."""
        items = scan_items(ddb, self.table)
        return {
            "entry_point": self.entry_point,
            "project": self.project.relative_to(_CDK_JSON.parent).as_posix(),  # as cdk.json has it
            "table": self.table,
            "rows": len(items),
            "check": _table_check(items, fleet.produced_records(), self.partition_key),
            "refused": _count_refusals(fleet, crash),
            "probe": self._probe(ddb, items),
        }

    def _probe(self, ddb: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Upsert a later record under the previous epoch of an item's shard: refused, nothing changed."""
        from latest_per_key.table import FencedLatestTable, StaleEpochError

        if not items:
            return {"probed": False}
        pk = self.partition_key
        item = min(items, key=lambda i: str(i[pk]["S"]))  # every item's epoch is 1 or more
        key, shard, epoch = item[pk]["S"], item["shard"]["S"], int(item["epoch"]["N"])
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
            FencedLatestTable(ddb, self.table).upsert(shard, epoch - 1, later)
        except StaleEpochError as exc:
            refused, error = True, str(exc)
        after = ddb.get_item(TableName=self.table, Key={pk: {"S": key}}, ConsistentRead=True).get("Item")
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


def scan_items(ddb: Any, name: str) -> list[dict[str, Any]]:
    """Every item of the table (one consistent scan)."""
    pages = ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def _stored(item: Mapping[str, Any]) -> tuple[str, int, bytes]:
    """(shard, sequence number, data) of the record an item holds (``pos`` is ``<sequence>.<sub-sequence>``)."""
    return item["shard"]["S"], int(item["pos"]["S"].split(".")[0]), item["data"]["B"]


def _table_check(
    items: Iterable[Mapping[str, Any]], produced: Sequence[tuple[str, str, str, bytes]], partition_key: str
) -> dict[str, Any]:
    """Every key produced has one item in the table, holding its newest record (shard, sequence, bytes)."""
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


def _count_refusals(fleet: Fleet, crash: Crash) -> dict[str, int]:
    """Refused writes in the workers' logs: ``latest_refused`` (older than the record stored; those on the
    ``crash`` victim's shards from the crash on too) and ``StaleEpochError`` (``demo_processor_lease_lost``)."""
    older = stale = after_crash = 0
    for e in fleet.lines("*.log", '"latest_refused"', '"demo_processor_lease_lost"'):
        if e.get("event") == "latest_refused":
            older += e["refused"]
            at = datetime.fromisoformat(e["ts"]).timestamp()
            if at >= crash.at and e["shard"] in crash.shards:
                after_crash += e["refused"]
        elif e.get("event") == "demo_processor_lease_lost" and e["error_type"] == "StaleEpochError":
            stale += 1
    return {"older_than_stored": older, "older_after_crash": after_crash, "stale_epoch": stale}
