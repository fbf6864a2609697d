"""Small builders for inline raw lines and curated rows (explicit schemas, no generated data)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.schemas import CURATED_SCHEMA, RAW_LINE_SCHEMA

OBJ = "s3://lake/raw/stream=orders/date=2026-11-21/hour=01/shardId-000000000001_1_0_9_0.jsonl.gz"
SEQ = "49600000000000000000000000000000000000000000000000000001"  # 56 digits


def record(**overrides: Any) -> dict[str, Any]:
    """A valid raw record of stream ``orders`` arriving at 01:02:03.456 UTC; keys set to ``...`` are removed."""
    base: dict[str, Any] = {
        "stream": "orders",
        "shard_id": "shardId-000000000001",
        "sequence_number": SEQ,
        "sub_sequence_number": 0,
        "partition_key": "pk-1",
        "arrival_time": "2026-11-21T01:02:03.456Z",
        "epoch": 3,
        "payload": {"event_id": "e-1", "amount": 5},
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def raw_lines(spark: SparkSession, rows: list[tuple[str | dict[str, Any], str]]) -> DataFrame:
    """``value``/``source_object`` rows; dict lines are serialized as JSON."""
    data = [(json.dumps(line) if isinstance(line, dict) else line, obj) for line, obj in rows]
    return spark.createDataFrame(data, RAW_LINE_SCHEMA)


def ts(text: str) -> datetime:
    """``2026-11-21T01:02:03.456`` as a naive UTC datetime (how Spark returns timestamps with a UTC session)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).replace(tzinfo=None)


def curated(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """Curated rows with defaults for every column not given."""
    defaults: dict[str, Any] = {
        "stream": "orders",
        "shard_id": "shardId-000000000001",
        "sequence_number": SEQ,
        "sub_sequence_number": 0,
        "partition_key": "pk-1",
        "arrival_time": ts("2026-11-21T01:02:03.456"),
        "epoch": 1,
        "payload": '{"amount":5}',
        "payload_base64": None,
        "event_id": None,
        "date": "2026-11-21",
        "hour": "01",
    }
    names = CURATED_SCHEMA.fieldNames()
    return spark.createDataFrame([tuple({**defaults, **r}[n] for n in names) for r in rows], CURATED_SCHEMA)
