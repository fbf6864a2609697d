"""End-to-end runs of both jobs on generated raw data with duplicates, retries and malformed lines."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import aggregate, compact, package
from spark_jobs.hours import parse_hour
from spark_jobs.schemas import REASONS
from tools.pipeline_data import GeneratedRaw, RawSpec, generate_raw

pytestmark = pytest.mark.spark

SPEC = RawSpec(
    records=3_000, duplicate_rate=0.05, retry_rate=0.02, malformed=6, shards=3, hours=3, batch_size=200
)
KEY = ["stream", "shard_id", "sequence_number", "sub_sequence_number"]


def _compact(
    spark: Any, lake: Path, start: str, end: str, event_id_field: str | None = None
) -> dict[str, int]:
    options = compact.CompactOptions(
        input=f"file://{lake}/raw",
        output=f"file://{lake}/curated",
        quarantine=str(lake / "quarantine"),  # a plain path works as well
        start=start,
        end=end,
        event_id_field=event_id_field,
    )
    return compact.run(spark, options)


@pytest.fixture
def raw(lake: Path) -> GeneratedRaw:
    return generate_raw(lake / "raw", SPEC)


def _rows(spark, path: Path) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.parquet(str(path)).collect())


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.parquet"))}


def test_compact_and_aggregate_end_to_end(spark, lake, raw):
    counts = _compact(spark, lake, "2026-11-21T00", "2026-11-21T02")

    curated = spark.read.parquet(str(lake / "curated"))
    assert curated.count() == raw.distinct_records == counts["curated"]
    assert curated.groupBy(*KEY).count().where("count > 1").count() == 0
    assert counts["lines"] == raw.lines
    assert counts["malformed"] == raw.malformed == 6
    assert counts["duplicates"] == raw.lines - raw.malformed - raw.distinct_records > 0
    assert sum(counts[r] for r in REASONS) == counts["malformed"]
    assert sorted(r.hour for r in curated.select("hour").distinct().collect()) == [0, 1, 2]  # inferred as int

    quarantine = spark.read.json(str(lake / "quarantine"))
    assert quarantine.count() == raw.malformed
    assert {r.reason for r in quarantine.collect()} <= set(REASONS)
    assert all(
        r.detail and r.line is not None and r.source_object.endswith(".jsonl.gz")
        for r in quarantine.collect()
    )

    assert aggregate.run(
        spark,
        aggregate.AggregateOptions(
            f"file://{lake}/curated", f"file://{lake}/metrics", "2026-11-21T00", "2026-11-21T02"
        ),
    ) == {"hours": 3}
    per_hour = {r.hour: r.records for r in spark.read.parquet(str(lake / "metrics/per_hour")).collect()}
    per_minute = spark.read.parquet(str(lake / "metrics/per_minute"))
    assert sum(per_hour.values()) == raw.distinct_records and len(per_hour) == 3
    assert {
        r.hour: r.total
        for r in per_minute.groupBy("hour").agg({"records": "sum"}).toDF("hour", "total").collect()
    } == (per_hour)
    assert per_minute.count() == 180  # every minute of the three hours has records


def test_event_id_field_also_drops_producer_retries(spark, lake, raw):
    assert raw.distinct_events < raw.distinct_records
    counts = _compact(spark, lake, "2026-11-21T00", "2026-11-21T02", event_id_field="event_id")
    curated = spark.read.parquet(str(lake / "curated"))
    assert counts["curated"] == curated.count() == raw.distinct_events
    assert (
        curated.where("event_id is not null").groupBy("event_id", "hour").count().where("count > 1").count()
        == 0
    )


def test_rerun_gives_the_same_rows_and_leaves_other_partitions_untouched(spark, lake, raw):
    _compact(spark, lake, "2026-11-21T00", "2026-11-21T02")
    before = _rows(spark, lake / "curated")
    untouched = _files(lake / "curated/date=2026-11-21/hour=02")
    rewritten = _files(lake / "curated/date=2026-11-21/hour=01")
    quarantine_before = sorted(tuple(r) for r in spark.read.json(str(lake / "quarantine")).collect())

    _compact(spark, lake, "2026-11-21T00", "2026-11-21T01")

    assert _rows(spark, lake / "curated") == before
    assert _files(lake / "curated/date=2026-11-21/hour=02") == untouched
    after = _files(lake / "curated/date=2026-11-21/hour=01")
    assert set(after).isdisjoint(rewritten)  # the hour really was rewritten (new job id in the names)...
    assert sorted(after.values()) != [] and len(after) == len(rewritten)
    assert sorted(tuple(r) for r in spark.read.json(str(lake / "quarantine")).collect()) == quarantine_before


def test_late_records_are_picked_up_by_rerunning_their_hour(spark, lake, raw):
    _compact(spark, lake, "2026-11-21T00", "2026-11-21T02")
    other_hours = {h: _files(lake / f"curated/date=2026-11-21/hour={h}") for h in ("00", "02")}
    hour_dir = lake / "raw/stream=orders/date=2026-11-21/hour=01"
    existing = gzip.decompress(sorted(hour_dir.glob("*.gz"))[0].read_bytes()).decode().splitlines()[0]
    again = json.loads(existing) | {"epoch": 9}
    late = [
        json.loads(existing) | {"sequence_number": str(10**57 - 1)[:56], "epoch": 9},
        json.loads(existing) | {"sequence_number": str(10**57 - 1)[:55], "epoch": 9},
        again,
    ]
    (hour_dir / "shardId-000000000009_late.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(r) + "\n" for r in late).encode())
    )
    before = spark.read.parquet(str(lake / "curated")).count()

    counts = _compact(spark, lake, "2026-11-21T01", "2026-11-21T01")

    curated = spark.read.parquet(str(lake / "curated"))
    assert curated.count() == before + 2
    assert counts["duplicates"] > 0
    kept = curated.where(
        f"sequence_number = '{again['sequence_number']}' and shard_id = '{again['shard_id']}'"
    )
    assert [r.epoch for r in kept.collect()] == [1]  # the original copy, not the late redelivery
    assert {h: _files(lake / f"curated/date=2026-11-21/hour={h}") for h in ("00", "02")} == other_hours


def test_empty_range_does_nothing(spark, lake, raw):
    counts = _compact(spark, lake, "2026-11-22T00", "2026-11-22T03")
    assert counts["lines"] == 0 and not (lake / "curated").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["--start", "2026-11-21", "--end", "2026-11-21T01"],
        ["--start", "2026-11-21T05", "--end", "2026-11-21T04"],
        ["--start", "2026-11-21T00", "--end", "2026-11-21T00", "--event-id-field", "a b"],
    ],
)
def test_compact_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit):
        compact.parse_args(["--input", "i", "--output", "o", "--quarantine", "q", *argv])
    assert "error" in capsys.readouterr().err


HOURS = ["--start", "2026-11-21T00", "--end", "2026-11-21T01"]


@pytest.mark.parametrize(
    ("roots", "words"),
    [
        (
            ["--input", "raw", "--output", "cur", "--quarantine", "cur/"],
            "--output and --quarantine are the same",
        ),
        (["--input", "raw", "--output", "cur", "--quarantine", "cur/q"], "--quarantine is inside --output"),
        (
            ["--input", "lake[1]/raw", "--output", "cur", "--quarantine", "q"],
            "reads [ ] in a path as a pattern",
        ),
        (
            ["--input", "raw", "--output", "c{a,b}", "--quarantine", "q"],
            "--output 'c{a,b}': Hadoop reads { }",
        ),
    ],
)
def test_roots_that_would_read_or_write_the_wrong_folders_are_refused_before_spark_starts(
    roots, words, capsys
):
    """A quarantine over the curated table would replace its partitions; a root with a glob character would
    match no folder (or others): refused in one line, exit 2."""
    with pytest.raises(SystemExit) as caught:
        compact.parse_args([*roots, *HOURS])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and words in err and len(err.splitlines()) == 1, err  # no usage block
    with pytest.raises(SystemExit):
        aggregate.parse_args(["--input", "cur", "--output", "cur/", *HOURS])
    assert "--input and --output are the same folder" in capsys.readouterr().err


def test_an_hour_is_exactly_yyyy_mm_ddthh():
    for text in ("2026-11-21T5", "2026-11-21T05:00", " 2026-11-21T05", "2026-1-21T05"):
        with pytest.raises(ValueError, match="must look like YYYY-MM-DDTHH"):
            parse_hour(text)
    assert parse_hour("2026-11-21T05").hour == 5


def test_raw_patterns_cover_the_inclusive_range_across_midnight():
    assert compact.raw_patterns("s3://b/raw/", "2026-11-21T23", "2026-11-22T00") == [
        "s3://b/raw/stream=*/date=2026-11-21/hour=23/*.jsonl.gz",
        "s3://b/raw/stream=*/date=2026-11-22/hour=00/*.jsonl.gz",
    ]


def _submit(tmp: Path, raw_root: Path) -> subprocess.CompletedProcess[str]:
    """spark-submit of the bundle's ``compact.py`` without ``--py-files``."""
    bundle = tmp / "dist"
    package.build(bundle / "spark_jobs.zip")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = sys.executable
    submit = Path(sys.executable).parent / "spark-submit"
    cmd = [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false"]
    cmd += ["--driver-java-options", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"]
    cmd += [str(bundle / "compact.py"), "--input", f"file://{raw_root}", "--output", f"file://{tmp}/curated"]
    cmd += ["--quarantine", f"file://{tmp}/quarantine", "--start", "2026-11-21T00", "--end", "2026-11-21T00"]
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_spark_submit_without_py_files_cannot_find_the_package(tmp_path):
    """The entry file alone is not enough: spark-submit needs the zip on ``--py-files``. (The bundle submitted
    with it, as a user runs it, is tests/spark/test_compact_cli.py's.)"""
    raw = generate_raw(tmp_path / "raw", RawSpec(records=10, hours=1, shards=1, batch_size=10))
    missing = _submit(tmp_path, raw_root=raw.root)
    assert missing.returncode != 0 and "No module named 'spark_jobs'" in missing.stdout + missing.stderr
    assert not (tmp_path / "curated").exists()


def test_an_hour_is_read_from_the_end_of_its_pattern_whatever_the_root_is_called():
    """A root such as ``backfill/date=2026-01-01`` still clears the quarantine of the hours it re-runs."""
    (pattern,) = compact.raw_patterns(
        "/lake/backfill/date=2026-01-01/hour=07", "2026-11-21T05", "2026-11-21T05"
    )
    assert compact._hours([pattern]) == [("2026-11-21", "05")]


def test_what_needs_spark_to_check_is_one_line_and_exit_2(spark, tmp_path, capsys):
    """A payload column list Spark cannot read or whose names the table has (in any case), an output root
    that is a file, a scheme this Spark has no file system for: refused before anything is read."""
    (tmp_path / "afile").write_text("x")
    roots = [
        "--input",
        str(tmp_path / "raw"),
        "--output",
        str(tmp_path / "cur"),
        "--quarantine",
        str(tmp_path / "q"),
    ]
    cases = [
        (["--payload-columns", "amount DECIMAL(38"], "compact: error: payload columns 'amount DECIMAL(38': "),
        (
            ["--payload-columns", "amount DECIMAL(50,2)"],
            "compact: error: payload columns 'amount DECIMAL(50,2)': ",
        ),
        (["--payload-columns", "Payload STRING"], "compact: error: payload columns ['Payload'] clash"),
    ]
    for extra, words in cases:
        assert compact.main([*roots, *HOURS, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and len([x for x in err.splitlines() if "error" in x]) == 1, err
    as_file = [
        "--input",
        str(tmp_path / "raw"),
        "--output",
        str(tmp_path / "afile"),
        "--quarantine",
        str(tmp_path / "q"),
    ]
    assert compact.main([*as_file, *HOURS]) == 2
    assert f"--output '{tmp_path / 'afile'}' is a file" in capsys.readouterr().err
    assert aggregate.main(["--input", "nosuchfs://b/cur", "--output", str(tmp_path / "m"), *HOURS]) == 2
    assert "aggregate: error: --input 'nosuchfs://b/cur': " in capsys.readouterr().err
    assert not (tmp_path / "cur").exists() and not (tmp_path / "m").exists()
