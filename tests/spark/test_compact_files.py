"""The compaction job on raw objects in files: every record's bytes back from its curated row, strictness about
the contract, CR handling, corrupt objects, paths with spaces, and outputs that a failed run leaves intact."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from spark_jobs import aggregate, storage
from spark_jobs.schemas import Reason
from tests.spark.helpers import (
    HOUR,
    curated_bytes,
    line,
    record,
    record_v1,
    run_compact,
    sink_objects,
    sink_records,
    write_object,
)
from tests.unit.test_raw_format import CASES
from tools.pipeline_duckdb import compare, duckdb_pipeline

pytestmark = pytest.mark.spark


def test_every_case_of_the_issue_comes_back_byte_for_byte_and_spark_agrees_with_duckdb(spark, lake):
    datas = [data for _, data, _ in CASES]
    records = sink_records(datas)
    sink_objects(lake, records)
    for path in (lake / "raw").rglob("*.gz"):
        for raw_line in gzip.decompress(path.read_bytes()).split(b"\n")[:-1]:
            json.loads(raw_line, parse_constant=lambda c: pytest.fail(f"{c} in a raw line"))

    counts = run_compact(lake, spark=spark)
    assert (counts["curated"], counts["malformed"], counts["corrupt_objects"]) == (len(CASES), 0, [])
    got = curated_bytes(spark, lake)
    assert got == {r.sequence_number: r.data for r in records}
    curated = {r.sequence_number: r for r in spark.read.parquet(str(lake / "curated")).collect()}
    for r, (case, _, as_text) in zip(records, CASES, strict=True):
        assert (curated[r.sequence_number].payload is not None) == as_text, case

    aggregate.run(
        spark, aggregate.AggregateOptions(str(lake / "curated"), str(lake), "2026-11-21T00", "2026-11-21T03")
    )
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    duckdb_pipeline(con, lake / "raw", lake / "duck")
    check = compare(con, lake, lake / "duck")
    assert check == {
        "curated_rows_spark": len(CASES),
        "curated_rows_duckdb": len(CASES),
        "curated_differences": 0,
        "duplicate_keys_spark": 0,
        "per_minute_differences": 0,
        "per_hour_differences": 0,
    }


def test_strict_about_the_contract_exact_about_the_data_on_hand_made_objects(spark, lake):
    raw = lake / "raw"
    good = [record(sequence_number=str(i), partition_key=f"pk-{i % 2}") for i in range(1, 6)]
    write_object(
        raw,
        "shardId-000000000001_a.jsonl.gz",
        [
            line(good[0]),
            line(good[1]),
            line(record(sequence_number="20", partition_key={"an": "object"})),
            line(record(sequence_number="21", partition_key=["an", "array"])),
            line(record(sequence_number="22", shard_id=True)),
            line(record(sequence_number="23", data=..., data_base64="YWJ")),
            line(record(sequence_number="24", data=..., data_base64="YW Jj")),
            line(record(sequence_number="25", data=..., data_base64="YWJj\n")),
            line(record(sequence_number="26", partition_key="pk")).replace('"pk"', '"p\rk"'),  # raw CR inside
            line(record(sequence_number="27", data='{"big": 1234567890123456789012345678901234567890}')),
            line(record(sequence_number="28", data="3.141592653589793238462643383279502884197")),
            json.dumps(good[2]),  # not the sink's layout, still valid
        ],
    )
    # valid records written by hand with CR-LF line ends, and one with CRs as whitespace inside
    write_object(
        raw,
        "shardId-000000000001_b.jsonl.gz",
        [line(good[3]), line(good[4]), line(record(sequence_number="30"))],
        end=b"\r\n",
    )
    write_object(
        raw,
        "shardId-000000000001_c.jsonl.gz",
        [line(record(sequence_number="31", data="5")).replace(",", ",\r")],
    )
    write_object(raw, "shardId-000000000001_v1.jsonl.gz", [line(record_v1(sequence_number="40"))])
    # an object cut short, and one that is not gzip at all, among good ones
    whole = gzip.compress(
        b"".join(line(record(sequence_number=str(50 + i))).encode() + b"\n" for i in range(300))
    )
    cut = raw / "stream=orders" / HOUR / "shardId-000000000002_cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    plain = raw / "stream=orders" / HOUR / "shardId-000000000002_plain.jsonl.gz"
    plain.write_bytes(line(record(sequence_number="60")).encode() + b"\n")
    # whole gzip data padded with zeros (Hadoop refuses it, Python's gzip would not), and an object of no bytes
    padded = raw / "stream=orders" / HOUR / "shardId-000000000002_padded.jsonl.gz"
    padded.write_bytes(gzip.compress(line(record(sequence_number="90")).encode() + b"\n") + bytes(16))
    empty = raw / "stream=orders" / HOUR / "shardId-000000000002_empty.jsonl.gz"
    empty.write_bytes(b"")
    write_object(
        raw,
        "shardId-000000000003_ok.jsonl.gz",
        [line(record(sequence_number="70", shard_id="shardId-000000000003"))],
    )
    write_object(
        raw,
        "shardId-000000000003_h2.jsonl.gz",
        [line(record(sequence_number="80", arrival_time="2026-11-21T02:00:00.000Z"))],
        hour="date=2026-11-21/hour=02",
    )

    counts = run_compact(lake, spark=spark, payload_columns="big DECIMAL(38,0)")

    curated = {r.sequence_number: r for r in spark.read.parquet(str(lake / "curated")).collect()}
    assert sorted(curated, key=int) == ["1", "2", "3", "4", "5", "27", "28", "30", "31", "40", "70", "80"]
    assert curated["27"].payload == '{"big": 1234567890123456789012345678901234567890}'
    assert curated["27"].big is None  # 40 digits do not fit DECIMAL(38,0): null, never a rounded number
    assert curated["28"].payload == "3.141592653589793238462643383279502884197"
    assert curated["40"].payload == '{"amount":5,"event_id":"e-1"}'  # format 1 is still read
    quarantine = spark.read.json(str(lake / "quarantine")).collect()
    reasons = sorted(
        (
            r.reason,
            re.search(r'"sequence_number":"(\d+)"', r.line)[1]
            if r.line
            else r.source_object.rsplit("_", 1)[1],
        )
        for r in quarantine
    )
    assert reasons == [
        (Reason.BAD_PAYLOAD, "23"),
        (Reason.BAD_PAYLOAD, "24"),
        (Reason.BAD_PAYLOAD, "25"),
        (Reason.CORRUPT_OBJECT, "cut.jsonl.gz"),
        (Reason.CORRUPT_OBJECT, "empty.jsonl.gz"),
        (Reason.CORRUPT_OBJECT, "padded.jsonl.gz"),
        (Reason.CORRUPT_OBJECT, "plain.jsonl.gz"),
        (Reason.UNPARSEABLE, "26"),  # one line, not split at the CR
        (Reason.WRONG_TYPE, "20"),
        (Reason.WRONG_TYPE, "21"),
        (Reason.WRONG_TYPE, "22"),
    ]
    assert [uri.rsplit("/", 1)[1] for uri in counts["corrupt_objects"]] == [
        cut.name,
        empty.name,
        padded.name,
        plain.name,
    ]
    assert {r.source_object for r in quarantine if r.reason == Reason.CORRUPT_OBJECT} == set(
        counts["corrupt_objects"]
    )
    assert counts["malformed"] == 7 and counts["lines"] == counts["valid"] + 7
    assert (
        counts[Reason.WRONG_TYPE] == 3 and counts[Reason.BAD_PAYLOAD] == 3 and counts[Reason.UNPARSEABLE] == 1
    )

    # the aggregates follow from the corrected rows
    aggregate.run(
        spark,
        aggregate.AggregateOptions(
            str(lake / "curated"), str(lake / "metrics"), "2026-11-21T00", "2026-11-21T03"
        ),
    )
    metrics = spark.read.parquet(str(lake / "metrics/per_hour")).collect()
    per_hour = {int(r.hour): (r.records, r.partition_keys) for r in metrics}  # read back, hour is a number
    keys_01 = {r.partition_key for r in curated.values() if int(r.hour) == 1}
    assert per_hour == {1: (11, len(keys_01)), 2: (1, 1)}


def test_a_path_with_spaces_and_a_malformed_line(spark, tmp_path):
    lake = tmp_path / "with space+and%percent"
    write_object(lake / "raw", "shard a_1.jsonl.gz", [line(record()), "not json"])
    counts = run_compact(lake, spark=spark)
    assert (counts["curated"], counts["malformed"]) == (1, 1)
    [bad] = spark.read.json(str(lake / "quarantine")).collect()
    assert bad.line == "not json" and bad.reason == Reason.UNPARSEABLE
    assert bad.source_object.endswith(
        "/with%20space+and%25percent/raw/stream=orders/date=2026-11-21/hour=01/shard%20a_1.jsonl.gz"
    )


def test_a_line_that_is_not_utf8_is_quarantined_with_its_exact_bytes(spark, lake):
    """A JSON parser reads a stray byte as U+FFFD: curating such a line would change the record's bytes."""
    good = line(record(sequence_number="1"))
    in_data = line(record(sequence_number="2", data='"AB"')).encode().replace(b"AB", b"A\xffB")
    in_key = line(record(sequence_number="3", partition_key="pk-\xe9")).encode("latin-1")
    surrogate = line(record(sequence_number="4", data='"AB"')).encode().replace(b"AB", b"\xed\xa0\x80")
    overlong = line(record(sequence_number="5", data='"AB"')).encode().replace(b"AB", b"\xc0\xaf")
    bad = [in_data, in_key, surrogate, overlong]
    write_object(lake / "raw", "s_1.jsonl.gz", [good, *bad])
    counts = run_compact(lake, spark=spark)
    assert (counts["curated"], counts[Reason.UNPARSEABLE], counts["malformed"]) == (1, 4, 4)
    assert [r.sequence_number for r in spark.read.parquet(str(lake / "curated")).collect()] == ["1"]
    quarantine = spark.read.json(str(lake / "quarantine")).collect()
    assert sorted(base64.b64decode(r.line_base64) for r in quarantine) == sorted(bad)
    assert {r.reason for r in quarantine} == {Reason.UNPARSEABLE}


def test_only_objects_right_in_an_hour_folder_are_read(spark, lake):
    """The hour folders are read whole; a file in a sub-folder is no raw object (nor is a corrupt one)."""
    write_object(lake / "raw", "s_1.jsonl.gz", [line(record(sequence_number="1"))])
    write_object(lake / "raw", "copy/s_2.jsonl.gz", [line(record(sequence_number="2"))])
    stray = lake / "raw" / "stream=orders" / HOUR / "copy" / "s_3.jsonl.gz"
    stray.write_bytes(gzip.compress(line(record(sequence_number="3")).encode() * 50)[:40])
    counts = run_compact(lake, spark=spark)
    assert (counts["lines"], counts["curated"], counts["corrupt_objects"]) == (1, 1, [])
    assert [r.sequence_number for r in spark.read.parquet(str(lake / "curated")).collect()] == ["1"]
    # nor one in a sub-folder named like a partition, which Spark's folder listing cannot place
    write_object(lake / "raw", "k=v/s_4.jsonl.gz", [line(record(sequence_number="4"))])
    counts = run_compact(lake, spark=spark)
    assert (counts["lines"], counts["curated"], counts["corrupt_objects"]) == (1, 1, [])


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_failed_run_changes_no_output(spark, lake, monkeypatch):
    raw = lake / "raw"
    write_object(raw, "s_1.jsonl.gz", [line(record(sequence_number="1")), "not json"])
    run_compact(lake, spark=spark)
    before = {name: _snapshot(lake / name) for name in ("curated", "quarantine")}

    write_object(raw, "s_2.jsonl.gz", [line(record(sequence_number="2")), "still not json"])
    real = storage.write_partitioned

    def failing(df: Any, path: str, fmt: str, **options: str) -> None:
        if fmt == "json":  # the quarantine is written after the curated rows
            raise OSError("disk full")
        real(df, path, fmt, **options)

    monkeypatch.setattr(storage, "write_partitioned", failing)
    with pytest.raises(OSError, match="disk full"):
        run_compact(lake, spark=spark)
    assert {name: _snapshot(lake / name) for name in ("curated", "quarantine")} == before

    monkeypatch.setattr(storage, "write_partitioned", real)
    counts = run_compact(lake, spark=spark)
    assert (counts["curated"], counts["malformed"]) == (2, 2)
    assert not list(lake.rglob("_staging-*")) and not list(lake.rglob("_trash-*"))


def test_a_move_that_fails_in_the_commit_leaves_both_outputs_as_they_were(spark, lake, monkeypatch):
    """The curated table and the quarantine are committed together: a rename refused in the second undoes
    the first, and the run fails with the outputs as they were; the next run commits both."""
    raw = lake / "raw"
    write_object(raw, "s_1.jsonl.gz", [line(record(sequence_number="1")), "not json"])
    run_compact(lake, spark=spark)
    before = {name: _snapshot(lake / name) for name in ("curated", "quarantine")}
    write_object(raw, "s_2.jsonl.gz", [line(record(sequence_number="2")), "still not json"])
    real, refused = storage.Staging._move, []

    def refusing(self: Any, fs: Any, source: Any, target: Any) -> None:
        if not refused and "/quarantine/date=" in str(target):  # the quarantine's new partition, into place
            refused.append(str(target))
            raise OSError("rename refused")
        real(self, fs, source, target)

    monkeypatch.setattr(storage.Staging, "_move", refusing)
    with pytest.raises(OSError, match="rename refused"):
        run_compact(lake, spark=spark)
    assert refused and {name: _snapshot(lake / name) for name in ("curated", "quarantine")} == before
    monkeypatch.setattr(storage.Staging, "_move", real)
    counts = run_compact(lake, spark=spark)
    assert (counts["curated"], counts["malformed"]) == (2, 2)
    assert not list(lake.rglob("_staging-*")) and not [p for p in lake.rglob("_trash-*/**/*") if p.is_file()]


def test_a_commit_cut_short_is_put_back_by_the_next_run(spark, lake):
    """A crash between moving the old partition aside and the new one in: the next job restores the old."""
    root = lake / "curated"
    old = root / "_trash-crashed" / HOUR
    old.mkdir(parents=True)
    (old / "part-0.parquet").write_bytes(b"old rows")
    (root / "_staging-crashed" / HOUR).mkdir(parents=True)
    (root / "date=2026-11-21" / "hour=02").mkdir(parents=True)
    (root / "date=2026-11-21" / "hour=02" / "part-0.parquet").write_bytes(b"hour 2")
    (root / "_trash-crashed" / "date=2026-11-21" / "hour=02").mkdir(parents=True)

    storage.Staging(spark, [str(root)])

    assert _snapshot(root) == {
        "date=2026-11-21/hour=01/part-0.parquet": b"old rows",
        "date=2026-11-21/hour=02/part-0.parquet": b"hour 2",  # already committed: the trash copy is dropped
    }


def test_rerunning_an_hour_replaces_its_quarantine_with_what_its_objects_hold_now(spark, lake):
    raw = lake / "raw"
    bad = write_object(raw, "s_1.jsonl.gz", [line(record(sequence_number="1")), "not json"])
    run_compact(lake, spark=spark)
    assert spark.read.json(str(lake / "quarantine")).count() == 1
    write_object(raw, bad.name, [line(record(sequence_number="1"))])  # the object is fixed
    counts = run_compact(lake, spark=spark)
    assert counts["malformed"] == 0
    assert not (lake / "quarantine" / HOUR).exists()
