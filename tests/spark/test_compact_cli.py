"""The compaction job as a user runs it (spark-submit of the bundle, as a subprocess) on a raw root whose path
holds a space, with a truncated object and malformed lines in one hour: it exits 0, names the bad object, and
the curated rows and both metrics tables equal the ones worked out by hand from the valid records. And the
aggregation job: a failed run leaves both metrics tables as they were."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import aggregate, package, storage
from spark_jobs.schemas import Reason
from tests.spark.helpers import HOUR, launcher_args, line, record, run_compact, ts, write_object

pytestmark = pytest.mark.spark

_HOUR_2 = "date=2026-11-21/hour=02"


def _submit(bundle: Path, job: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = sys.executable
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    cmd = [str(Path(sys.executable).parent / "spark-submit"), *launcher_args("local[1]")]
    cmd += ["--py-files", str(bundle / "spark_jobs.zip"), str(bundle / f"{job}.py"), *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def _summary(done: subprocess.CompletedProcess[str], job: str) -> dict[str, Any]:
    [found] = [ln for ln in done.stdout.splitlines() if ln.startswith("{") and f'"job": "{job}"' in ln]
    summary: dict[str, Any] = json.loads(found)
    return summary


def _raw_with_trouble(raw: Path) -> tuple[Path, list[str]]:
    """Hour 01: valid records (one delivered twice), malformed lines, a truncated object; hour 02: one record.
    Returns the truncated object and the malformed lines."""
    a, b, c = (f"4960000000000000000000000000000000000000000000000000000{i}" for i in (1, 2, 3))
    malformed = [
        line(
            record(sequence_number="71", partition_key={"an": "object"}, arrival_time="2026-11-21T01:05:01Z")
        ),
        line(record(sequence_number="72", shard_id=True)),
        line(record(sequence_number="73", data=..., data_base64="YW Jj")),
        "not json",
    ]
    write_object(
        raw,
        "shardId-000000000001_1_0_3_0.jsonl.gz",
        [
            line(record(sequence_number=a, partition_key="pk-a", epoch=3)),
            malformed[0],
            line(
                record(
                    sequence_number=b,
                    partition_key="pk-b",
                    arrival_time="2026-11-21T01:02:10.000Z",
                    data=...,
                    data_base64="AP8=",
                )
            ),
            malformed[1],
            line(record(sequence_number=c, partition_key="pk-a", arrival_time="2026-11-21T01:05:00.000Z")),
            malformed[2],
            malformed[3],
        ],
    )
    # the first record again, from a later epoch (a redelivery after a failover), CR-LF line end
    write_object(
        raw,
        "shardId-000000000001_1_0_1_0.jsonl.gz",
        [line(record(sequence_number=a, partition_key="pk-a", epoch=5))],
        end=b"\r\n",
    )
    lost = gzip.compress(
        b"".join(
            line(record(sequence_number=str(900 + i), arrival_time="2026-11-21T01:03:00.000Z")).encode()
            + b"\n"
            for i in range(200)
        )
    )
    cut = raw / "stream=orders" / HOUR / "shardId-000000000002_900_0_1099_0.jsonl.gz"
    cut.write_bytes(lost[: len(lost) * 2 // 3])
    write_object(
        raw,
        "shardId-000000000003_10_0_10_0.jsonl.gz",
        [
            line(
                record(
                    sequence_number="10",
                    shard_id="shardId-000000000003",
                    partition_key="pk-z",
                    arrival_time="2026-11-21T02:00:00.500Z",
                )
            )
        ],
        hour=_HOUR_2,
    )
    return cut, malformed


def _metrics(spark: Any, path: Path, bucket: str) -> list[tuple[Any, ...]]:
    rows = spark.read.parquet(str(path)).collect()
    return sorted(
        (r[bucket], r.records, r.shards, r.partition_keys, r.binary_records, r.first_arrival, r.last_arrival)
        for r in rows
    )


def test_cli_on_a_path_with_a_space_a_truncated_object_and_malformed_lines(spark, tmp_path):
    lake = tmp_path / "lake with space"
    cut, malformed = _raw_with_trouble(lake / "raw")
    bundle = tmp_path / "dist"
    package.build(bundle / "spark_jobs.zip")
    window = ["--start", "2026-11-21T00", "--end", "2026-11-21T03"]

    args = ["--input", str(lake / "raw"), "--output", f"file://{lake}/curated"]
    done = _submit(bundle, "compact", [*args, "--quarantine", str(lake / "quarantine"), *window], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stdout + done.stderr
    summary = _summary(done, "compact")
    [named] = summary["corrupt_objects"]
    assert named.endswith("/lake%20with%20space/raw/stream=orders/date=2026-11-21/hour=01/" + cut.name)
    assert (summary["curated"], summary["duplicates"], summary["malformed"]) == (4, 1, 4)
    assert (summary[Reason.WRONG_TYPE], summary[Reason.BAD_PAYLOAD], summary[Reason.UNPARSEABLE]) == (2, 1, 1)
    # Spark's executor logs the failed read (a Java stack trace); the job then finds the object, says so and
    # compacts the rest: a warning, no Python traceback, exit 0.
    assert "1 raw objects cannot be read; compacting without them" in done.stdout + done.stderr

    curated = spark.read.parquet(str(lake / "curated")).collect()
    assert sorted((r.sequence_number[-1], r.epoch, r.hour) for r in curated) == [
        ("0", 3, 2),  # read back, the hour partition is a number
        ("1", 3, 1),  # the lowest epoch of the two copies
        ("2", 3, 1),
        ("3", 3, 1),
    ]
    quarantine = spark.read.json(str(lake / "quarantine")).collect()
    assert sorted((r.reason, r.line) for r in quarantine if r.line is not None) == sorted(
        [
            (Reason.WRONG_TYPE, malformed[0]),
            (Reason.WRONG_TYPE, malformed[1]),
            (Reason.BAD_PAYLOAD, malformed[2]),
            (Reason.UNPARSEABLE, malformed[3]),
        ]
    )
    assert [(r.reason, r.source_object) for r in quarantine if r.line is None] == [
        (Reason.CORRUPT_OBJECT, named)
    ]

    aggregate.run(
        spark, aggregate.AggregateOptions(f"file://{lake}/curated", str(lake / "metrics"), *window[1::2])
    )
    # Worked out by hand from the three valid records of hour 01 and the one of hour 02; the malformed line
    # at 01:05:01 and the 200 records of the truncated object at 01:03 count nowhere.
    first, second, third = ts("2026-11-21T01:02:03.456"), ts("2026-11-21T01:02:10"), ts("2026-11-21T01:05:00")
    fourth = ts("2026-11-21T02:00:00.500")
    minute = datetime.fromisoformat
    assert _metrics(spark, lake / "metrics/per_minute", "minute") == [
        (minute("2026-11-21T01:02"), 2, 1, 2, 1, first, second),
        (minute("2026-11-21T01:05"), 1, 1, 1, 0, third, third),
        (minute("2026-11-21T02:00"), 1, 1, 1, 0, fourth, fourth),
    ]
    assert _metrics(spark, lake / "metrics/per_hour", "hour_start") == [
        (minute("2026-11-21T01:00"), 3, 1, 2, 1, first, third),
        (minute("2026-11-21T02:00"), 1, 1, 1, 0, fourth, fourth),
    ]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_failed_aggregation_leaves_both_metrics_tables_as_they_were(spark, lake, monkeypatch):
    raw = lake / "raw"
    write_object(raw, "s_1.jsonl.gz", [line(record(sequence_number="1"))])
    run_compact(lake, spark=spark)
    options = aggregate.AggregateOptions(
        str(lake / "curated"), str(lake / "metrics"), "2026-11-21T00", "2026-11-21T03"
    )
    aggregate.run(spark, options)
    before = _snapshot(lake / "metrics")
    assert {r.records for r in spark.read.parquet(str(lake / "metrics/per_hour")).collect()} == {1}

    write_object(raw, "s_2.jsonl.gz", [line(record(sequence_number="2"))])
    run_compact(lake, spark=spark)
    real = storage.write_partitioned
    written: list[str] = []

    def failing(df: Any, path: str, fmt: str, **options: str) -> None:
        if written:  # the per-minute table is staged; the per-hour one fails
            raise OSError("disk full")
        real(df, path, fmt, **options)
        written.append(path)

    monkeypatch.setattr(storage, "write_partitioned", failing)
    with pytest.raises(OSError, match="disk full"):
        aggregate.run(spark, options)
    assert written and _snapshot(lake / "metrics") == before

    monkeypatch.setattr(storage, "write_partitioned", real)
    aggregate.run(spark, options)
    for table in ("per_minute", "per_hour"):
        assert {r.records for r in spark.read.parquet(str(lake / "metrics" / table)).collect()} == {2}
    assert not list(lake.rglob("_staging-*")) and not list(lake.rglob("_trash-*"))
