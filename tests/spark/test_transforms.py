"""Each transform on small inline data with explicit schemas, asserting on that transform's own output."""

from __future__ import annotations

import json
from decimal import Decimal
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
    quarantined_objects,
    sequence_order,
    valid_records,
    with_event_id,
    with_payload_columns,
)
from tests.spark.helpers import OBJ, SEQ, curated, line, raw_lines, record, record_v1, ts

pytestmark = pytest.mark.spark


def _parsed(spark: Any, rows: list[tuple[Any, str]]) -> list[Any]:
    return raw_lines(spark, rows).transform(parse_raw_lines).collect()


def test_parse_valid_line_types_fields_and_takes_partitions_from_the_path(spark):
    [row] = _parsed(spark, [(record(), OBJ)])
    assert row.reason is None and row.field is None
    assert (row.path_stream, row.date, row.hour, row.v) == ("orders", "2026-11-21", "01", 2)
    assert row.sequence_number == SEQ and row.sub_sequence_number == 0 and row.epoch == 3
    assert row.arrival_time == ts("2026-11-21T01:02:03.456")
    assert row.source_object == OBJ and row.data == '{"event_id": "e-1", "amount": 5}'


GOOD = line(record())
OTHER_PATH = "file:/tmp/raw/orders/2026-11-21/01/x.jsonl.gz"
#: (case, line, object, reason, field): one rule each, and lines that look odd but are valid.
PARSE_CASES: list[tuple[str, Any, str, str | None, str | None]] = [
    # not one strict JSON object
    ("not JSON", "not json at all", OBJ, Reason.UNPARSEABLE, None),
    ("an array", '["an", "array"]', OBJ, Reason.UNPARSEABLE, None),
    ("an array holding the record", f"[{GOOD}]", OBJ, Reason.UNPARSEABLE, None),
    ("cut short", '{"stream": "orders", "shard_id": ', OBJ, Reason.UNPARSEABLE, None),
    ("empty line", "", OBJ, Reason.UNPARSEABLE, None),
    ("text after the object", GOOD + " x", OBJ, Reason.UNPARSEABLE, None),
    ("a bracket after the object", GOOD + "]", OBJ, Reason.UNPARSEABLE, None),
    ("two records on one line", GOOD + GOOD, OBJ, Reason.UNPARSEABLE, None),
    ("two records and a comma", GOOD + "," + GOOD, OBJ, Reason.UNPARSEABLE, None),
    ("NaN in a field", GOOD[:-1] + ',"extra":NaN}', OBJ, Reason.UNPARSEABLE, None),
    ("Infinity as epoch", GOOD.replace('"epoch":3', '"epoch":Infinity'), OBJ, Reason.UNPARSEABLE, None),
    ("a duplicate key", GOOD[:-1] + ',"epoch":3}', OBJ, Reason.UNPARSEABLE, None),
    ("a lone surrogate", GOOD.replace('"pk-1"', '"pk\\ud800"'), OBJ, Reason.UNPARSEABLE, None),
    ("a raw CR inside a string", GOOD.replace('"pk-1"', '"pk\r1"'), OBJ, Reason.UNPARSEABLE, None),
    ("a raw tab inside a string", GOOD.replace('"pk-1"', '"pk\t1"'), OBJ, Reason.UNPARSEABLE, None),
    ("single quotes", GOOD.replace('"pk-1"', "'pk-1'"), OBJ, Reason.UNPARSEABLE, None),
    ("a trailing comma", GOOD[:-1] + ",}", OBJ, Reason.UNPARSEABLE, None),
    ("a comment", GOOD.replace('"epoch":3', '"epoch":/* three */3'), OBJ, Reason.UNPARSEABLE, None),
    ("leading zeros", GOOD.replace('"epoch":3', '"epoch":03'), OBJ, Reason.UNPARSEABLE, None),
    # each field's JSON type
    ("partition_key an object", record(partition_key={"a": 1}), OBJ, Reason.WRONG_TYPE, "partition_key"),
    ("partition_key an array", record(partition_key=["pk"]), OBJ, Reason.WRONG_TYPE, "partition_key"),
    ("shard_id a boolean", record(shard_id=True), OBJ, Reason.WRONG_TYPE, "shard_id"),
    ("stream a number", record(stream=5), OBJ, Reason.WRONG_TYPE, "stream"),
    ("sequence_number a number", record(sequence_number=12), OBJ, Reason.WRONG_TYPE, "sequence_number"),
    ("arrival_time a number", record(arrival_time=1), OBJ, Reason.WRONG_TYPE, "arrival_time"),
    ("epoch a string", record(epoch="three"), OBJ, Reason.WRONG_TYPE, "epoch"),
    ("epoch a numeric string", record(epoch="3"), OBJ, Reason.WRONG_TYPE, "epoch"),
    ("epoch a fraction", record(epoch=3.5), OBJ, Reason.WRONG_TYPE, "epoch"),
    ("epoch a boolean", record(epoch=True), OBJ, Reason.WRONG_TYPE, "epoch"),
    (
        "sub_sequence_number an object",
        record(sub_sequence_number={}),
        OBJ,
        Reason.WRONG_TYPE,
        "sub_sequence_number",
    ),
    ("v a string", record(v="2"), OBJ, Reason.WRONG_TYPE, "v"),
    ("data an object", record(data={"a": 1}), OBJ, Reason.WRONG_TYPE, "data"),
    ("data a number", record(data=5), OBJ, Reason.WRONG_TYPE, "data"),
    ("data_base64 a number", record(data=..., data_base64=1234), OBJ, Reason.WRONG_TYPE, "data_base64"),
    (
        "payload_base64 an array",
        record_v1(payload=..., payload_base64=["AP8="]),
        OBJ,
        Reason.WRONG_TYPE,
        "payload_base64",
    ),
    # version, required fields, values
    ("an unknown version", record(v=3), OBJ, Reason.UNSUPPORTED_VERSION, None),
    ("v 1 (format 1 has no v)", record(v=1), OBJ, Reason.UNSUPPORTED_VERSION, None),
    ("v 1 with format-1 fields", {**record_v1(), "v": 1}, OBJ, Reason.UNSUPPORTED_VERSION, None),
    ("v null", record(v=None), OBJ, Reason.UNSUPPORTED_VERSION, None),
    ("epoch 2.0", GOOD.replace('"epoch":3', '"epoch":2.0'), OBJ, Reason.WRONG_TYPE, "epoch"),
    ("epoch 2^63", GOOD.replace('"epoch":3', f'"epoch":{2**63}'), OBJ, Reason.WRONG_TYPE, "epoch"),
    ("two fields wrong", record(epoch="3", shard_id=1), OBJ, Reason.WRONG_TYPE, "shard_id, epoch"),
    ("two fields missing", record(epoch=..., stream=None), OBJ, Reason.MISSING_FIELD, "stream, epoch"),
    ("no shard_id", record(shard_id=...), OBJ, Reason.MISSING_FIELD, "shard_id"),
    ("arrival_time null", record(arrival_time=None), OBJ, Reason.MISSING_FIELD, "arrival_time"),
    ("no epoch", record(epoch=...), OBJ, Reason.MISSING_FIELD, "epoch"),
    ("a sequence with letters", record(sequence_number="12ab"), OBJ, Reason.BAD_SEQUENCE_NUMBER, None),
    ("a 57-digit sequence", record(sequence_number="1" * 57), OBJ, Reason.BAD_SEQUENCE_NUMBER, None),
    ("a negative sub-sequence", record(sub_sequence_number=-1), OBJ, Reason.BAD_SUB_SEQUENCE_NUMBER, None),
    ("a negative epoch", record(epoch=-2), OBJ, Reason.BAD_EPOCH, None),
    ("a date, no time", record(arrival_time="2026-11-21"), OBJ, Reason.BAD_ARRIVAL_TIME, None),
    ("an impossible date", record(arrival_time="2026-13-45T01:02:03Z"), OBJ, Reason.BAD_ARRIVAL_TIME, None),
    # the payload
    ("neither data nor base64", record(data=...), OBJ, Reason.BAD_PAYLOAD, None),
    ("data and base64", record(data_base64="AAAA"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data null", record(data=None), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 YWJ", record(data=..., data_base64="YWJ"), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 with a space", record(data=..., data_base64="YW Jj"), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 with a newline", record(data=..., data_base64="YWJj\n"), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 not at all", record(data=..., data_base64="not base64 !!"), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 padding inside", record(data=..., data_base64="YQ==YQ=="), OBJ, Reason.BAD_PAYLOAD, None),
    ("data not JSON", record(data="plain text"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data with text after it", record(data="[1] x"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data with a bracket after it", record(data="1] [2"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data two values", record(data="1 2"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data NaN", record(data="NaN"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data with duplicate keys", record(data='{"a":1,"a":2}'), OBJ, Reason.BAD_PAYLOAD, None),
    ("data empty", record(data=""), OBJ, Reason.BAD_PAYLOAD, None),
    ("data with a byte-order mark", record(data="\ufeff1"), OBJ, Reason.BAD_PAYLOAD, None),
    ("data with a lone surrogate", record(data='"\\udc00"'), OBJ, Reason.BAD_PAYLOAD, None),
    ("format 1 without payload", record_v1(payload=...), OBJ, Reason.BAD_PAYLOAD, None),
    ("format 1 with both", record_v1(payload_base64="AAAA"), OBJ, Reason.BAD_PAYLOAD, None),
    ("format 1 bad base64", record_v1(payload=..., payload_base64="YWJ"), OBJ, Reason.BAD_PAYLOAD, None),
    ("base64 padding bits", record(data=..., data_base64="YR=="), OBJ, Reason.BAD_PAYLOAD, None),
    ("data null beside base64", record(data=None, data_base64="AP8="), OBJ, Reason.BAD_PAYLOAD, None),
    ("data nested 501 deep", record(data="[" * 501 + "]" * 501), OBJ, Reason.BAD_PAYLOAD, None),
    ("a key of 10,001 characters", record(data=f'{{"{"k" * 10_001}":1}}'), OBJ, Reason.BAD_PAYLOAD, None),
    # the partition
    ("another stream", record(stream="payments"), OBJ, Reason.WRONG_PARTITION, None),
    ("another hour", record(arrival_time="2026-11-21T02:00:00.000Z"), OBJ, Reason.WRONG_PARTITION, None),
    ("an offset, right hour", record(arrival_time="2026-11-21T03:02:03.456+02:00"), OBJ, None, None),
    (
        "an offset, wrong hour",
        record(arrival_time="2026-11-21T01:02:03.456+02:00"),
        OBJ,
        Reason.WRONG_PARTITION,
        None,
    ),
    ("no stream=/date=/hour= path", record(), OTHER_PATH, Reason.WRONG_PARTITION, None),
    # valid, though not as the sink writes them
    ("spaces after separators", record(), OBJ, None, None),
    ("CR-LF at the end", GOOD + "\r", OBJ, None, None),
    ("whitespace around", " \t" + GOOD + " \r", OBJ, None, None),
    ("fields in another order", line(dict(reversed(list(record().items())))), OBJ, None, None),
    ("an unknown extra field", record(extra={"epoch": 9}), OBJ, None, None),
    ("escaped field names", GOOD.replace('"epoch"', '"\\u0065poch"'), OBJ, None, None),
    ("a JSON null payload", record(data="null"), OBJ, None, None),
    ("a payload holding ]", record(data='{"a": [1, {"b": []}]}'), OBJ, None, None),
    ("empty bytes", record(data=..., data_base64=""), OBJ, None, None),
    ("binary", record(data=..., data_base64="AP8="), OBJ, None, None),
    ("format 1", record_v1(), OBJ, None, None),
    ("format 1, payload null", record_v1(payload=None), OBJ, None, None),
    ("format 1, binary", record_v1(payload=..., payload_base64="AP8="), OBJ, None, None),
    ("data nested 500 deep", record(data="[" * 500 + "]" * 500), OBJ, None, None),
    ("a key of 10,000 characters", record(data=f'{{"{"k" * 10_000}":1}}'), OBJ, None, None),
    ("base64 canonical padding", record(data=..., data_base64="YWI="), OBJ, None, None),
]


@pytest.fixture(scope="module")
def parse_results(spark) -> list[Any]:
    """Every case in one Spark job (a job per case would cost seconds each)."""
    rows = [
        (json.dumps(value) if case.startswith("spaces") else value, obj)
        for case, value, obj, _, _ in PARSE_CASES
    ]
    return _parsed(spark, rows)


@pytest.mark.parametrize(
    ("index", "case"), list(enumerate(c[0] for c in PARSE_CASES)), ids=[c[0] for c in PARSE_CASES]
)
def test_parse_names_the_first_broken_rule(parse_results, index, case):
    *_, reason, field = PARSE_CASES[index]
    row = parse_results[index]
    assert (row.reason, row.field) == (reason, field), row.line


#: (case, record data as written, the curated payload text) - the exact text, never re-serialized.
EXACT = [
    ("40-digit integer", "1234567890123456789012345678901234567890"),
    ("pi to 40 digits", '{"pi": 3.141592653589793238462643383279502884197}'),
    ("20-digit decimal", "0.12345678901234567890"),
    ("1e400", "1e400"),
    ("minus zero and exponents", "[-0, 1E+2, 1e-7]"),
    ("key order and spacing", '{"z": 1, "a": [1, 2.5]}'),
    ("escapes", '{"name":"caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/"}'),
    ("raw unicode", '{"name":"café 😀 \u2028"}'),
    ("CR-LF whitespace", '\r\n {\r\n\t"a" : 1\r\n}\r\n '),
    ("a JSON string", '"5"'),
    ("a number", "5"),
    ("null", "null"),
]


def test_valid_records_keep_the_exact_text_of_each_payload(spark):
    lines = [(record(sequence_number=str(i), data=text), OBJ) for i, (_, text) in enumerate(EXACT)]
    lines += [
        (record(sequence_number="100", data=..., data_base64="AP8="), OBJ),
        (record_v1(sequence_number="101", payload={"z": 1, "a": [1, 2.5]}), OBJ),
        (record_v1(sequence_number="102", payload=..., payload_base64="AP8="), OBJ),
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
        **{str(i): (text, None) for i, (_, text) in enumerate(EXACT)},
        "100": (None, "AP8="),
        "101": ('{"a":[1,2.5],"z":1}', None),  # format 1: its sink had re-serialized it already
        "102": (None, "AP8="),
    }


def test_with_event_id_reads_nested_and_numeric_fields(spark):
    lines = [
        (record(sequence_number="1", data='{"meta": {"id": "a-1"}}'), OBJ),
        (record(sequence_number="2", data='{"meta": {"id": 42}}'), OBJ),
        (record(sequence_number="3", data='{"other": 1}'), OBJ),
        (record(sequence_number="4", data=..., data_base64="AP8="), OBJ),
        (record_v1(sequence_number="5", payload={"meta": {"id": "b-2"}}), OBJ),
        (record(sequence_number="6", data='[{"meta": {"id": 1}}]'), OBJ),
        (
            record(sequence_number="7", data='{"meta": {"id": 12345678901234567890123456789012345678901}}'),
            OBJ,
        ),
        (record(sequence_number="8", data='{"meta": {"id": {"a": 1}}}'), OBJ),
        (record(sequence_number="9", data='{"meta": {"id": 1E3}}'), OBJ),
        (record_v1(sequence_number="10", payload={"meta": {"id": 10**40}}), OBJ),
    ]
    parsed = raw_lines(spark, lines).transform(parse_raw_lines)
    got = {r.sequence_number: r.event_id for r in parsed.transform(with_event_id("meta.id")).collect()}
    assert got == {
        "1": "a-1",
        "2": "42",
        "3": None,
        "4": None,
        "5": "b-2",
        "6": None,
        "7": "12345678901234567890123456789012345678901",  # every digit, never a double
        "8": None,
        "9": None,
        "10": str(10**40),
    }
    assert {r.event_id for r in parsed.transform(with_event_id(None)).collect()} == {None}


def test_payload_columns_are_derived_from_the_exact_text(spark):
    rows = [
        {"sequence_number": "1", "payload": '{"amount": 0.12345678901234567890, "n": 12, "sku": "a"}'},
        {"sequence_number": "2", "payload": '{"amount": 123456789012345678.5, "n": 3.5, "sku": 5}'},
        {
            "sequence_number": "3",
            "payload": '{"amount": 1e400, "n": 1234567890123456789012345678901234567890}',
        },
        {"sequence_number": "4", "payload": None, "payload_base64": "AP8="},
        {"sequence_number": "5", "payload": '"just a string"'},
        {"sequence_number": "6", "payload": '{"amount": "0.5", "n": "12", "sku": "b"}'},
    ]
    typed = curated(spark, rows).transform(
        with_payload_columns("amount DECIMAL(38,20), n BIGINT, sku STRING")
    )
    assert typed.columns[-3:] == ["amount", "n", "sku"]
    got = {r.sequence_number: (r.amount, r.n, r.sku) for r in typed.collect()}
    assert got == {
        "1": (Decimal("0.12345678901234567890"), 12, "a"),  # all 20 digits: no trip through a double
        "2": (Decimal("123456789012345678.50000000000000000000"), None, "5"),
        "3": (None, None, None),  # does not fit: null, not a rounded value
        "4": (None, None, None),
        "5": (None, None, None),
        "6": (None, None, "b"),  # a JSON string is no number
    }
    # Spark's JSON reader rounds a DECIMAL half-up to its scale: more fraction digits than the scale give null
    rows = [
        {"sequence_number": "1", "payload": '{"c": 0.135, "d": 1.50, "e": 0.12345678901234567890}'},
        {"sequence_number": "2", "payload": '{"c": 1.999, "d": 1.500000, "e": 0.123456789012345678}'},
        {
            "sequence_number": "3",
            "payload": '{"c": 99999999.99, "d": 123456789.0, "e": 123456789012345678901.5}',
        },
        {
            "sequence_number": "4",
            "payload": '{"c": 123456789.1, "d": 99999999.99, "e": 12345678901234567890.5}',
        },
        {"sequence_number": "5", "payload": '{"c": 1e2, "d": -0.50, "e": 12}'},
        {"sequence_number": "6", "payload": '{"c": 0.10, "d": 0.0000, "e": -0.000000000000000001}'},
        {"sequence_number": "7", "payload": '{"c": 0.005, "d": 1.0000000000000000000000000000000000000000}'},
    ]
    typed = curated(spark, rows).transform(
        with_payload_columns("c DECIMAL(10,2), d DECIMAL(10,1), e DECIMAL(38,18)")
    )
    got = {r.sequence_number: (r.c, r.d, r.e) for r in typed.collect()}
    assert got == {
        "1": (None, Decimal("1.5"), None),  # 0.14 and 0.123456789012345679 were rounded; 1.50 is 1.5 exactly
        "2": (None, Decimal("1.5"), Decimal("0.123456789012345678")),
        "3": (Decimal("99999999.99"), Decimal("123456789.0"), None),  # 21 integer digits: too many for 38-18
        "4": (None, None, Decimal("12345678901234567890.5")),
        "5": (None, Decimal("-0.5"), Decimal("12")),  # an exponent (1e2) gives null: no exact digits to read
        "6": (Decimal("0.10"), Decimal("0.0"), Decimal("-0.000000000000000001")),
        "7": (None, None, None),  # 0.01 was rounded; 41 written digits are read as a double (documented)
    }
    with pytest.raises(ValueError, match="clash"):
        curated(spark, rows).transform(with_payload_columns("epoch BIGINT"))
    assert curated(spark, rows).transform(with_payload_columns(None)).columns == list(CURATED_COLUMNS)


def test_numbers_inside_structs_arrays_and_maps_are_held_to_their_text_too(spark):
    schema = (
        "s STRUCT<c: DECIMAL(10,2), n: BIGINT, t: STRING>, a ARRAY<DECIMAL(10,2)>, m MAP<STRING, DECIMAL(10,1)>,"
        " deep ARRAY<STRUCT<x: DECIMAL(10,2), xs: ARRAY<DOUBLE>>>"
    )
    rows = [
        {
            "sequence_number": "1",
            "payload": '{"s": {"c": 0.135, "n": 7, "t": "k"}, "a": [0.135, 1.25, 1e2, "0.5"],'
            ' "m": {"p": 1.50, "q": 0.05}, "deep": [{"x": 0.125, "xs": [1.5, 2.25]}, {"x": 2.5}]}',
        },
        {
            "sequence_number": "2",
            "payload": '{"s": {"c": "0.5", "n": "12", "t": "k"}, "a": [], "m": {}, "deep": null}',
        },
        {"sequence_number": "3", "payload": '{"s": null, "a": null}'},
        {"sequence_number": "4", "payload": '{"s": {"c": 12345678901234567890.5}, "a": [0.10, -3]}'},
        # a key twice: no VARIANT of the payload, so no DECIMAL can be held to its text (null), as at top level
        {
            "sequence_number": "5",
            "payload": '{"a": [1.25], "m": {"p": 1.5}, "deep": [{"xs": [2.5]}], "t": 1, "t": 2}',
        },
    ]
    typed = curated(spark, rows).transform(with_payload_columns(schema))
    got = {r.sequence_number: r for r in typed.collect()}
    one = got["1"]
    # the rounded 0.14, the exponent and the JSON string give null; the rest of each value is kept
    assert (one.s.c, one.s.n, one.s.t) == (None, 7, "k")
    assert one.a == [None, Decimal("1.25"), None, None]
    assert one.m == {"p": Decimal("1.5"), "q": None}
    assert [(d.x, d.xs) for d in one.deep] == [(None, [1.5, 2.25]), (Decimal("2.50"), None)]
    two = got["2"]
    assert (two.s.c, two.s.n, two.s.t) == (None, None, "k")  # strings are no numbers, nested too
    assert (two.a, two.m, two.deep) == ([], {}, None)
    assert (got["3"].s, got["3"].a, got["3"].m) == (None, None, None)
    assert got["4"].s.c is None and got["4"].a == [Decimal("0.10"), Decimal("-3.00")]
    five = got["5"]
    assert (five.a, five.m, [(d.x, d.xs) for d in five.deep]) == ([None], {"p": None}, [(None, [2.5])])


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
    lines = [
        (record(), OBJ),
        ("oops", OBJ),
        (record(partition_key=None), OBJ),
        (record(partition_key={"a": 1}), OBJ),
    ]
    out = raw_lines(spark, lines).transform(parse_raw_lines).transform(quarantined)
    assert out.columns == ["source_object", "line", "line_base64", "reason", "detail", "date", "hour"]
    assert {r.line_base64 for r in out.collect()} == {None}  # valid UTF-8: the line says it all
    got = sorted((r.line[:4], r.reason, r.detail, r.date, r.hour) for r in out.collect())
    assert got == [
        (
            "oops",
            Reason.UNPARSEABLE,
            "not one strict JSON object (UTF-8, RFC 8259, unique keys, nothing after it)",
            "2026-11-21",
            "01",
        ),
        ('{"v"', Reason.MISSING_FIELD, "missing or null: partition_key", "2026-11-21", "01"),
        ('{"v"', Reason.WRONG_TYPE, "wrong JSON type: partition_key", "2026-11-21", "01"),
    ]
    lines_out = {r.reason: r.line for r in out.collect()}
    assert lines_out[Reason.WRONG_TYPE] == line(record(partition_key={"a": 1}))  # the line exactly as read


def test_quarantined_objects_are_whole_objects_with_their_error(spark):
    objects = spark.createDataFrame([(OBJ, "EOFError: cut short")], "source_object string, detail string")
    [row] = objects.transform(quarantined_objects).collect()
    assert row.asDict() == {
        "source_object": OBJ,
        "line": None,
        "line_base64": None,
        "reason": Reason.CORRUPT_OBJECT,
        "detail": "the object could not be read: EOFError: cut short",
        "date": "2026-11-21",
        "hour": "01",
    }


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
