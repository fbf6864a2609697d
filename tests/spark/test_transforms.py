"""Each transform on small inline data with explicit schemas, asserting on that transform's own output."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.schemas import Reason
from spark_jobs.transforms import (
    CURATED_COLUMNS,
    MissingColumnsError,
    deduplicate,
    event_id_path,
    hour_metrics,
    minute_metrics,
    parse_raw_lines,
    quarantined,
    sequence_order,
    valid_records,
    with_event_id,
)
from tests.spark.helpers import OBJ, SEQ, curated, raw_lines, record, ts

pytestmark = pytest.mark.spark


def _parsed(spark: Any, rows: list[tuple[Any, str]]) -> list[Any]:
    return raw_lines(spark, rows).transform(parse_raw_lines).collect()


def test_parse_valid_line_types_fields_and_takes_partitions_from_the_path(spark):
    [row] = _parsed(spark, [(record(), OBJ)])
    assert row.reason is None and row.missing is None
    assert (row.path_stream, row.date, row.hour) == ("orders", "2026-11-21", "01")
    assert row.sequence_number == SEQ and row.sub_sequence_number == 0 and row.epoch == 3
    assert row.arrival_time == ts("2026-11-21T01:02:03.456")
    assert row.source_object == OBJ


@pytest.mark.parametrize(
    ("line", "obj", "reason", "missing"),
    [
        ("not json at all", OBJ, Reason.UNPARSEABLE, None),
        ('["an", "array"]', OBJ, Reason.UNPARSEABLE, None),
        ('{"stream": "orders", "shard_id": ', OBJ, Reason.UNPARSEABLE, None),
        ("", OBJ, Reason.UNPARSEABLE, None),
        (record(epoch="three"), OBJ, Reason.UNPARSEABLE, None),
        (record(shard_id=...), OBJ, Reason.MISSING_FIELD, "shard_id"),
        (record(arrival_time=None), OBJ, Reason.MISSING_FIELD, "arrival_time"),
        (record(sequence_number="12ab"), OBJ, Reason.BAD_SEQUENCE_NUMBER, None),
        (record(sequence_number="1" * 57), OBJ, Reason.BAD_SEQUENCE_NUMBER, None),
        (record(sub_sequence_number=-1), OBJ, Reason.BAD_SUB_SEQUENCE_NUMBER, None),
        (record(epoch=-2), OBJ, Reason.BAD_EPOCH, None),
        (record(arrival_time="2026-11-21"), OBJ, Reason.BAD_ARRIVAL_TIME, None),
        (record(arrival_time="2026-13-45T01:02:03Z"), OBJ, Reason.BAD_ARRIVAL_TIME, None),
        (record(payload=...), OBJ, Reason.BAD_PAYLOAD, None),
        (record(payload_base64="AAAA"), OBJ, Reason.BAD_PAYLOAD, None),
        (record(payload=..., payload_base64="not base64 !!"), OBJ, Reason.BAD_PAYLOAD, None),
        (record(stream="payments"), OBJ, Reason.WRONG_PARTITION, None),
        (record(arrival_time="2026-11-21T02:00:00.000Z"), OBJ, Reason.WRONG_PARTITION, None),
        (record(arrival_time="2026-11-21T03:02:03.456+02:00"), OBJ, None, None),  # 01:02 UTC: right hour
        (record(arrival_time="2026-11-21T01:02:03.456+02:00"), OBJ, Reason.WRONG_PARTITION, None),
        (record(), "file:/tmp/raw/orders/2026-11-21/01/x.jsonl.gz", Reason.WRONG_PARTITION, None),
        (record(payload=None), OBJ, None, None),  # a JSON null payload is a payload
        (record(payload=..., payload_base64="AP8="), OBJ, None, None),
    ],
)
def test_parse_names_the_first_broken_rule(spark, line, obj, reason, missing):
    [row] = _parsed(spark, [(line, obj)])
    assert (row.reason, row.missing) == (reason, missing)


def test_valid_records_keeps_valid_lines_and_payload_as_exact_json(spark):
    lines = [
        (record(sequence_number="1", payload={"z": 1, "a": [1, 2.5]}), OBJ),
        (record(sequence_number="2", payload="5"), OBJ),
        (record(sequence_number="3", payload=5), OBJ),
        (record(sequence_number="4", payload=None), OBJ),
        (record(sequence_number="5", payload=..., payload_base64="AP8="), OBJ),
        ("garbage", OBJ),
    ]
    out = (
        raw_lines(spark, lines)
        .transform(parse_raw_lines)
        .transform(with_event_id(None))
        .transform(valid_records)
    )
    assert tuple(out.columns) == CURATED_COLUMNS
    got = {r.sequence_number: (r.payload, r.payload_base64) for r in out.collect()}
    assert got == {
        "1": ('{"a":[1,2.5],"z":1}', None),
        "2": ('"5"', None),
        "3": ("5", None),
        "4": ("null", None),
        "5": (None, "AP8="),
    }


def test_with_event_id_reads_nested_and_numeric_fields(spark):
    lines = [
        (record(sequence_number="1", payload={"meta": {"id": "a-1"}}), OBJ),
        (record(sequence_number="2", payload={"meta": {"id": 42}}), OBJ),
        (record(sequence_number="3", payload={"other": 1}), OBJ),
        (record(sequence_number="4", payload=..., payload_base64="AP8="), OBJ),
    ]
    parsed = raw_lines(spark, lines).transform(parse_raw_lines)
    got = {r.sequence_number: r.event_id for r in parsed.transform(with_event_id("meta.id")).collect()}
    assert got == {"1": "a-1", "2": "42", "3": None, "4": None}
    assert {r.event_id for r in parsed.transform(with_event_id(None)).collect()} == {None}


@pytest.mark.parametrize("field", ["", "a..b", "x'] OR 1", "$.a"])
def test_event_id_path_rejects_unsafe_names(field):
    with pytest.raises(ValueError, match="event id field"):
        event_id_path(field)


def test_event_id_path_builds_bracket_path():
    assert event_id_path("meta.event-id") == "$['meta']['event-id']"


def test_deduplicate_keeps_lowest_epoch_copy_per_record(spark):
    rows = [
        {"sequence_number": "7", "epoch": 4, "partition_key": "late-copy"},
        {"sequence_number": "7", "epoch": 2, "partition_key": "first-copy"},
        {"sequence_number": "7", "epoch": 2, "sub_sequence_number": 1},  # another KPL sub-record
        {"sequence_number": "7", "shard_id": "shardId-000000000002"},  # another shard
        {"sequence_number": "7", "stream": "payments"},  # another stream
        {"sequence_number": "70"},
    ]
    out = curated(spark, rows).transform(deduplicate)
    got = sorted(
        (r.stream, r.shard_id, r.sequence_number, r.sub_sequence_number, r.epoch) for r in out.collect()
    )
    assert got == [
        ("orders", "shardId-000000000001", "7", 0, 2),
        ("orders", "shardId-000000000001", "7", 1, 2),
        ("orders", "shardId-000000000001", "70", 0, 1),
        ("orders", "shardId-000000000002", "7", 0, 1),
        ("payments", "shardId-000000000001", "7", 0, 1),
    ]
    kept = out.where(
        "stream = 'orders' and sequence_number = '7' and sub_sequence_number = 0 and shard_id like '%1'"
    )
    assert [r.partition_key for r in kept.collect()] == ["first-copy"]


def test_deduplicate_is_scoped_to_the_hour_partition(spark):
    rows = [{"hour": "01"}, {"hour": "01", "epoch": 5}, {"hour": "02"}]
    assert sorted(r.hour for r in curated(spark, rows).transform(deduplicate).collect()) == ["01", "02"]


def test_deduplicate_result_does_not_depend_on_input_order_or_partitioning(spark):
    rows = [
        {"sequence_number": str(i % 5), "epoch": e, "payload": f'{{"v":{e}}}'}
        for i in range(20)
        for e in (3, 1, 2)
    ]
    a = curated(spark, rows).transform(deduplicate).collect()
    b = curated(spark, list(reversed(rows))).repartition(3).transform(deduplicate).collect()
    assert sorted(a) == sorted(b)
    assert {(r.sequence_number, r.epoch, r.payload) for r in a} == {(str(i), 1, '{"v":1}') for i in range(5)}


def test_deduplicate_by_event_id_keeps_the_earliest_delivery(spark):
    rows = [
        {"sequence_number": "10", "event_id": "e-1", "arrival_time": ts("2026-11-21T01:00:05")},
        {"sequence_number": "9", "event_id": "e-1", "arrival_time": ts("2026-11-21T01:00:01")},  # first try
        {"sequence_number": "9", "event_id": "e-1", "arrival_time": ts("2026-11-21T01:00:01"), "epoch": 7},
        {"sequence_number": "11", "event_id": "e-2"},
        {"sequence_number": "12", "event_id": None},
        {"sequence_number": "12", "event_id": None, "epoch": 9},
        {"sequence_number": "13", "event_id": None},
    ]
    got = sorted(
        (r.sequence_number, r.event_id, r.epoch)
        for r in curated(spark, rows).transform(deduplicate).collect()
    )
    assert got == [("11", "e-2", 1), ("12", None, 1), ("13", None, 1), ("9", "e-1", 1)]


def test_sequence_order_is_numeric_for_strings_longer_than_decimal(spark):
    values = ["10", "9", "100", "1" + "0" * 55, "9" * 55, "2"]
    df = spark.createDataFrame([(v,) for v in values], "sequence_number string")
    ordered = [r.sequence_number for r in df.orderBy(*sequence_order()).collect()]
    assert ordered == sorted(values, key=int)


def test_quarantined_keeps_bad_lines_with_reason_and_detail(spark):
    lines = [(record(), OBJ), ("oops", OBJ), (record(partition_key=None), OBJ)]
    out = raw_lines(spark, lines).transform(parse_raw_lines).transform(quarantined)
    assert out.columns == ["source_object", "line", "reason", "detail", "date", "hour"]
    got = sorted((r.line[:4], r.reason, r.detail, r.date, r.hour) for r in out.collect())
    assert got == [
        ("oops", Reason.UNPARSEABLE, "not a JSON object with the documented field types", "2026-11-21", "01"),
        ('{"st', Reason.MISSING_FIELD, "missing or null: partition_key", "2026-11-21", "01"),
    ]


def test_minute_and_hour_metrics(spark):
    rows = [
        {"sequence_number": "1", "arrival_time": ts("2026-11-21T01:00:10"), "partition_key": "a"},
        {"sequence_number": "2", "arrival_time": ts("2026-11-21T01:00:50"), "partition_key": "a"},
        {
            "sequence_number": "3",
            "arrival_time": ts("2026-11-21T01:01:00"),
            "shard_id": "s2",
            "payload": None,
            "payload_base64": "AP8=",
        },
        {"sequence_number": "4", "arrival_time": ts("2026-11-21T01:01:30"), "partition_key": "b"},
    ]
    df = curated(spark, rows)
    minutes = sorted(tuple(r) for r in minute_metrics(df).collect())
    assert minutes == [
        (
            "orders",
            ts("2026-11-21T01:00"),
            2,
            1,
            1,
            0,
            ts("2026-11-21T01:00:10"),
            ts("2026-11-21T01:00:50"),
            "2026-11-21",
            "01",
        ),
        (
            "orders",
            ts("2026-11-21T01:01"),
            2,
            2,
            2,
            1,
            ts("2026-11-21T01:01:00"),
            ts("2026-11-21T01:01:30"),
            "2026-11-21",
            "01",
        ),
    ]
    [hour] = [tuple(r) for r in hour_metrics(df).collect()]
    assert hour == (
        "orders",
        ts("2026-11-21T01:00"),
        4,
        2,
        3,
        1,
        ts("2026-11-21T01:00:10"),
        ts("2026-11-21T01:01:30"),
        "2026-11-21",
        "01",
    )


def test_missing_columns_error_names_missing_and_present(spark):
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(MissingColumnsError) as err:
        parse_raw_lines(df)
    assert err.value.missing == ["source_object"] and err.value.present == ["value"]
    assert "source_object" in str(err.value) and "value" in str(err.value)
