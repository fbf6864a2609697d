"""Late raw objects and ``--only-stale``: a run over a few hours rewrites only the hours whose output is older than
one of their raw objects (or absent), in both jobs, and leaves the other hours' files as they were.

Raw objects are written by the real sink code; the ones of the first delivery are dated as they would be, while
their hour was current (hours ago), and a late object lands afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from consumer.records import Record
from spark_jobs import aggregate, compact, freshness
from tests.spark.helpers import sink_objects

pytestmark = pytest.mark.spark

DAY = "2026-11-21"
SEQ = "4960000000000000000000000000000000000000000000000000"


class _Done:
    def mark_done(self, index: int) -> None:
        pass


def _records(hour: int, numbers: list[int], shard: str = "shardId-000000000001") -> list[Record]:
    """Records of ``hour`` (arrival minute = number), as a worker hands them to the sink."""
    records = [
        Record(
            "orders",
            shard,
            f"{SEQ}{hour:02d}{n:02d}",
            0,
            f"pk-{n}",
            f'{{"n": {n}}}'.encode(),
            datetime(2026, 11, 21, hour, n, 7, tzinfo=UTC),
        )
        for n in numbers
    ]
    for i, r in enumerate(records):
        r._attach(_Done(), i)
    return records


def _deliver(lake: Path, records: list[Record], written: datetime | None = None) -> list[Path]:
    """Raw objects of ``records`` as the sink uploads them; ``written``: their modification time."""
    keys = sink_objects(lake, records).objects
    paths = [lake / key for key in keys]
    if written is not None:
        for path in paths:
            os.utime(path, (written.timestamp(), written.timestamp()))
    return paths


def _files(folder: Path) -> dict[str, int]:
    """Every file of a partition (hidden ones too) -> its modification time in ns."""
    return {p.name: p.stat().st_mtime_ns for p in sorted(folder.iterdir())}


def _partitions(lake: Path, hours: list[str]) -> dict[str, dict[str, int]]:
    tables = ("curated", "metrics/per_minute", "metrics/per_hour")
    return {f"{t}/{h}": _files(lake / t / f"date={DAY}" / f"hour={h}") for t in tables for h in hours}


def _compact(spark: Any, lake: Path, start: str, end: str, only_stale: bool) -> dict[str, Any]:
    options = compact.CompactOptions(
        input=str(lake / "raw"),
        output=str(lake / "curated"),
        quarantine=str(lake / "quarantine"),
        start=f"{DAY}T{start}",
        end=f"{DAY}T{end}",
        only_stale=only_stale,
    )
    return compact.run(spark, options)


def _aggregate(spark: Any, lake: Path, start: str, end: str, only_stale: bool) -> dict[str, Any]:
    options = aggregate.AggregateOptions(
        str(lake / "curated"), str(lake / "metrics"), f"{DAY}T{start}", f"{DAY}T{end}", only_stale
    )
    return aggregate.run(spark, options)


@pytest.fixture
def compacted(spark: Any, lake: Path) -> Path:
    """Hours 00..02 delivered while they were current and compacted and aggregated (as the schedule does)."""
    for hour in (0, 1, 2):
        _deliver(lake, _records(hour, [1, 2, 3]), written=datetime(2026, 11, 21, hour, 59, tzinfo=UTC))
    assert _compact(spark, lake, "00", "02", only_stale=False)["curated"] == 9
    assert _aggregate(spark, lake, "00", "02", only_stale=False) == {"hours": 3}
    return lake


def test_only_stale_rewrites_the_hour_with_a_late_object_and_the_new_hour(
    spark: Any, compacted: Path
) -> None:
    lake = compacted
    before = _partitions(lake, ["00", "02"])
    hour_01 = lake / "curated" / f"date={DAY}" / "hour=01"
    oldest_output = min(p.stat().st_mtime for p in hour_01.glob("*.parquet"))
    # A failover: the new owner redelivers from its checkpoint (record 3 again) and goes on (record 4). The object
    # is dated before every file of hour 01's curated partition, as one that landed while that hour was being
    # compacted, after its objects were listed: only the listing's time shows that it was not read.
    _deliver(
        lake,
        _records(1, [3, 4], shard="shardId-000000000001"),
        written=datetime.fromtimestamp(oldest_output - 1, UTC),
    )
    _deliver(lake, _records(3, [5]))  # hour 03: raw objects, no output yet

    counts = _compact(spark, lake, "00", "03", only_stale=True)

    assert counts["rewritten"] == [f"{DAY}T01", f"{DAY}T03"], counts
    assert counts["skipped_fresh"] == [f"{DAY}T00", f"{DAY}T02"], counts
    assert counts["lines"] == 3 + 2 + 1 and counts["duplicates"] == 1 and counts["curated"] == 5
    rows = spark.read.parquet(str(lake / "curated")).collect()
    assert sorted((r.hour, r.sequence_number[-4:]) for r in rows) == [
        (0, "0001"), (0, "0002"), (0, "0003"),
        (1, "0101"), (1, "0102"), (1, "0103"), (1, "0104"),
        (2, "0201"), (2, "0202"), (2, "0203"),
        (3, "0305"),
    ]  # fmt: skip

    summary = _aggregate(spark, lake, "00", "03", only_stale=True)

    assert summary == {
        "hours": 2,
        "rewritten": [f"{DAY}T01", f"{DAY}T03"],
        "skipped_fresh": [f"{DAY}T00", f"{DAY}T02"],
    }
    per_hour = {r.hour: r.records for r in spark.read.parquet(str(lake / "metrics/per_hour")).collect()}
    assert per_hour == {0: 3, 1: 4, 2: 3, 3: 1}
    assert _partitions(lake, ["00", "02"]) == before  # same files, same modification times


def test_without_the_flag_every_hour_is_rewritten(spark: Any, compacted: Path) -> None:
    lake = compacted
    before = _partitions(lake, ["00", "01", "02"])

    counts = _compact(spark, lake, "00", "02", only_stale=False)
    summary = _aggregate(spark, lake, "00", "02", only_stale=False)

    assert counts["curated"] == 9 and "rewritten" not in counts
    assert summary == {"hours": 3}
    after = _partitions(lake, ["00", "01", "02"])
    for partition, files in after.items():
        assert set(files).isdisjoint(before[partition]), partition  # new files (and a new marker) everywhere


def test_an_hour_whose_objects_arrived_after_its_listing_is_stale() -> None:
    """The rule itself: an output's marker is the time its input was listed; a raw object counts as listed only
    when older than that by the margin (an upload in flight may already carry its time)."""
    listed = 10_000_000
    curated = freshness.Partition(newest_ms=listed + 50_000, listed_at_ms=listed)
    assert freshness.compaction_is_fresh(listed - freshness.RAW_MARGIN_MS - 1, [curated, None])
    assert not freshness.compaction_is_fresh(listed - freshness.RAW_MARGIN_MS, [curated, None])
    assert not freshness.compaction_is_fresh(0, [None, None])  # raw objects, no output: stale
    unmarked = freshness.Partition(newest_ms=listed, listed_at_ms=None)
    assert not freshness.compaction_is_fresh(0, [unmarked, None])
    # Only malformed lines now: the quarantine partition's marker is the newest.
    quarantine = freshness.Partition(newest_ms=listed * 2, listed_at_ms=listed * 2)
    assert freshness.compaction_is_fresh(listed + 1, [curated, quarantine])
    metrics = freshness.Partition(newest_ms=listed + 5, listed_at_ms=listed + 5)
    assert freshness.aggregation_is_fresh(freshness.Partition(listed, listed - 9), [metrics, metrics])
    assert not freshness.aggregation_is_fresh(freshness.Partition(listed + 5, None), [metrics, metrics])
    assert not freshness.aggregation_is_fresh(freshness.Partition(listed, None), [metrics, None])


@pytest.mark.parametrize("job", ["compact", "aggregate"])
def test_the_flag_takes_no_value_one_line_exit_2(job: str, tmp_path: Path) -> None:
    roots = ["--input", str(tmp_path / "a"), "--output", str(tmp_path / "b")]
    if job == "compact":
        roots += ["--quarantine", str(tmp_path / "q")]
    hours = ["--start", f"{DAY}T00", "--end", f"{DAY}T02"]
    module = compact if job == "compact" else aggregate
    assert module.parse_args([*roots, *hours, "--only-stale"]).only_stale is True
    assert module.parse_args([*roots, *hours]).only_stale is False
    done = subprocess.run(
        [sys.executable, "-m", f"spark_jobs.{job}", *roots, *hours, "--only-stale=yes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"{job}: error: argument --only-stale: ignored explicit argument 'yes' (see {job} --help)"
    ]
    assert not (tmp_path / "b").exists()
