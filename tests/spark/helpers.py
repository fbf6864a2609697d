"""Small builders for inline raw lines and curated rows (explicit schemas, no generated data), and for raw
objects in files: hand-made, or exactly as the sink uploads them."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from consumer.records import Record
from consumer.sinks.raw_s3 import RawS3Sink
from spark_jobs import compact
from spark_jobs.local import LOCAL_SETTINGS
from spark_jobs.schemas import CURATED_SCHEMA, RAW_LINE_SCHEMA

HOUR = "date=2026-11-21/hour=01"
ARRIVAL = datetime(2026, 11, 21, 1, 2, 3, 456000, tzinfo=UTC)

OBJ = "s3://lake/raw/stream=orders/date=2026-11-21/hour=01/shardId-000000000001_1_0_9_0.jsonl.gz"
SEQ = "49600000000000000000000000000000000000000000000000000001"  # 56 digits


def record(**overrides: Any) -> dict[str, Any]:
    """A valid format-2 raw record of stream ``orders`` arriving at 01:02:03.456 UTC, fields in the sink's
    order; keys set to ``...`` are removed, new keys go last."""
    base: dict[str, Any] = {
        "v": 2,
        "stream": "orders",
        "shard_id": "shardId-000000000001",
        "sequence_number": SEQ,
        "sub_sequence_number": 0,
        "partition_key": "pk-1",
        "arrival_time": "2026-11-21T01:02:03.456Z",
        "epoch": 3,
        "data": '{"event_id": "e-1", "amount": 5}',
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def record_v1(**overrides: Any) -> dict[str, Any]:
    """The same record in format 1 (no ``v``; ``payload`` as parsed JSON or ``payload_base64``)."""
    base = record(v=..., data=..., payload={"event_id": "e-1", "amount": 5})
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not ...}


def line(value: dict[str, Any]) -> str:
    """A record as the sink writes lines: compact JSON, non-ASCII as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def raw_lines(spark: SparkSession, rows: list[tuple[str | dict[str, Any], str]]) -> DataFrame:
    """``value``/``source_object`` rows; dict lines are serialized as the sink writes them."""
    data = [(line(value) if isinstance(value, dict) else value, obj) for value, obj in rows]
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


class MemoryS3:
    """The one S3 call the sink makes, kept in memory."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **_: Any) -> None:
        self.objects[Key] = Body


def sink_objects(lake: Path, records: list[Record], epoch: int = 1) -> MemoryS3:
    """Raw objects exactly as the sink uploads them, under ``lake/raw``."""
    s3 = MemoryS3()
    sink = RawS3Sink(client=s3, bucket="lake", prefix="raw")
    sink._epoch = epoch
    for r in records:
        sink._add(r)  # buffered in its arrival hour, as process_records does
    for hour in list(sink._buffers):
        sink._write(hour)
    for key, body in s3.objects.items():
        path = lake / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
    return s3


class _Done:
    def mark_done(self, index: int) -> None:
        pass


def sink_records(datas: list[bytes], shard: str = "shardId-000000000001") -> list[Record]:
    """Records as a worker hands them to the sink (manual checkpointing: ``done()`` works)."""
    seq = "4960000000000000000000000000000000000000000000000000"
    records = [
        Record("orders", shard, f"{seq}{i:04d}", 0, f"pk-{i}", d, ARRIVAL) for i, d in enumerate(datas)
    ]
    for i, r in enumerate(records):
        r._attach(_Done(), i)
    return records


def write_object(
    root: Path, name: str, lines: list[str | bytes], hour: str = HOUR, end: bytes = b"\n"
) -> Path:
    """A hand-made raw object (gzip JSON lines) under ``root/stream=orders/<hour>/``."""
    path = root / "stream=orders" / hour / name
    path.parent.mkdir(parents=True, exist_ok=True)
    body = b"".join((x if isinstance(x, bytes) else x.encode()) + end for x in lines)
    path.write_bytes(gzip.compress(body))
    return path


def run_compact(lake: Path, raw: Path | None = None, **extra: Any) -> dict[str, Any]:
    return compact.run(
        extra.pop("spark"),
        compact.CompactOptions(
            input=str(raw or lake / "raw"),
            output=str(lake / "curated"),
            quarantine=str(lake / "quarantine"),
            start="2026-11-21T00",
            end="2026-11-21T03",
            **extra,
        ),
    )


def curated_bytes(spark: Any, lake: Path) -> dict[str, bytes]:
    """sequence number -> the record's bytes, from the curated table alone."""
    rows = spark.read.parquet(str(lake / "curated")).collect()
    return {
        r.sequence_number: r.payload.encode("utf-8")
        if r.payload is not None
        else base64.b64decode(r.payload_base64)
        for r in rows
    }


def launcher_args(master: str = LOCAL_SETTINGS["spark.master"]) -> list[str]:
    """spark-submit's options for a job run as a user runs it, with the settings that make tiny jobs fast
    (``spark_jobs.local.LOCAL_SETTINGS``): ``--master``, a ``--conf`` per setting, the driver's JVM options."""
    java = "spark.driver.extraJavaOptions"
    args = ["--master", master, "--driver-java-options", LOCAL_SETTINGS[java]]
    for key, value in LOCAL_SETTINGS.items():
        if key not in ("spark.master", java):
            args += ["--conf", f"{key}={value}"]
    return args
