"""docs/data-format.md case by case, through the job's own entry (``compact.main``, what spark-submit and EMR
run): one raw root with a line per case, one run, then an assertion per case on the curated row or the
quarantine row it became. The five promises the compaction broke, and the points the contract now decides."""

from __future__ import annotations

import base64
import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import compact
from spark_jobs.schemas import REASONS, Reason
from tests.spark.helpers import HOUR, line, record, record_v1, ts, write_object

pytestmark = pytest.mark.spark

BIG = 1234567890123456789012345678901234567890  # 40 digits: beyond a double and Spark's 38-digit decimal
K = "\\u006b"  # "k", escaped: one character of the decoded key


def rec(seq: int, **overrides: Any) -> dict[str, Any]:
    """A valid format-2 record with sequence number ``seq`` and an event id of its own."""
    return record(**{"sequence_number": str(seq), "data": json.dumps({"event_id": f"e-{seq}"}), **overrides})


def rec_v1(seq: int, **overrides: Any) -> dict[str, Any]:
    """The same in format 1."""
    return record_v1(**{"sequence_number": str(seq), "payload": {"event_id": f"e-{seq}"}, **overrides})


def _replace(value: dict[str, Any], old: str, new: str) -> str:
    text = line(value)
    assert text.count(old) == 1, (old, text)
    return text.replace(old, new)


NOT_UTF8 = line(rec(301, partition_key="pk-AB")).encode().replace(b"pk-AB", b"pk-A\xffB")

#: (case, line, reason, detail or None): lines that must go to quarantine, and why.
QUARANTINED: list[tuple[str, str | bytes, str, str | None]] = [
    # 1. format 1 has no "v": a "v" of 1 is a version this job does not read
    ("v 1 with a payload", line({**rec_v1(101), "v": 1}), Reason.UNSUPPORTED_VERSION, None),
    ("v 1 with data", line(rec(102, v=1)), Reason.UNSUPPORTED_VERSION, None),
    ("v null", line(rec(103, v=None)), Reason.UNSUPPORTED_VERSION, None),
    ("v null, format-1 fields", line({**rec_v1(104), "v": None}), Reason.UNSUPPORTED_VERSION, None),
    # 2. data beyond Spark's bounds is no JSON text the format keeps
    ("data nested 501 deep", line(rec(201, data="[" * 501 + "]" * 501)), Reason.BAD_PAYLOAD, None),
    (
        "objects nested 501 deep",
        line(rec(202, data='{"a":' * 501 + "1" + "}" * 501)),
        Reason.BAD_PAYLOAD,
        None,
    ),
    ("a key of 10,001 characters", line(rec(203, data=f'{{"{"k" * 10_001}": 1}}')), Reason.BAD_PAYLOAD, None),
    (
        "a key of 10,001 escaped characters",
        line(rec(204, data=f'{{"a": {{"{K * 10_001}": 1}}}}')),
        Reason.BAD_PAYLOAD,
        None,
    ),
    # 3. a line that is not UTF-8 (its line_base64 is checked below)
    ("not UTF-8", NOT_UTF8, Reason.UNPARSEABLE, None),
    # integers: digits only, within a signed 64-bit integer
    ("epoch 2.0", _replace(rec(601), '"epoch":3', '"epoch":2.0'), Reason.WRONG_TYPE, "epoch"),
    ("epoch 1E0", _replace(rec(602), '"epoch":3', '"epoch":1E0'), Reason.WRONG_TYPE, "epoch"),
    ("epoch 2^63", _replace(rec(603), '"epoch":3', f'"epoch":{2**63}'), Reason.WRONG_TYPE, "epoch"),
    (
        "sub_sequence_number 0.0",
        _replace(rec(604), '"sub_sequence_number":0', '"sub_sequence_number":0.0'),
        Reason.WRONG_TYPE,
        "sub_sequence_number",
    ),
    (
        "sub_sequence_number 1e0",
        _replace(rec(605), '"sub_sequence_number":0', '"sub_sequence_number":1e0'),
        Reason.WRONG_TYPE,
        "sub_sequence_number",
    ),
    (
        "sub_sequence_number 2^64",
        _replace(rec(606), '"sub_sequence_number":0', f'"sub_sequence_number":{2**64}'),
        Reason.WRONG_TYPE,
        "sub_sequence_number",
    ),
    ("v 2.0", _replace(rec(607), '"v":2', '"v":2.0'), Reason.WRONG_TYPE, "v"),
    # a null payload field counts as there: exactly one of data / data_base64, and a string
    ("data null beside data_base64", line(rec(611, data=None, data_base64="AP8=")), Reason.BAD_PAYLOAD, None),
    ("data_base64 null beside data", line(rec(612, data_base64=None)), Reason.BAD_PAYLOAD, None),
    (
        "format 1: payload_base64 null beside payload",
        line(rec_v1(613, payload_base64=None)),
        Reason.BAD_PAYLOAD,
        None,
    ),
    # ISO-8601: only YYYY-MM-DDTHH:MM:SS[.1-9 digits](Z|+hh:mm|-hh:mm)
    ("lowercase z", line(rec(621, arrival_time="2026-11-21T01:02:03.456z")), Reason.BAD_ARRIVAL_TIME, None),
    ("lowercase t", line(rec(622, arrival_time="2026-11-21t01:02:03.456Z")), Reason.BAD_ARRIVAL_TIME, None),
    ("24:00", line(rec(623, arrival_time="2026-11-21T24:00:00Z")), Reason.BAD_ARRIVAL_TIME, None),
    ("a leap second", line(rec(624, arrival_time="2026-11-21T01:59:60Z")), Reason.BAD_ARRIVAL_TIME, None),
    ("basic format", line(rec(625, arrival_time="20261121T010203Z")), Reason.BAD_ARRIVAL_TIME, None),
    (
        "a decimal comma",
        line(rec(626, arrival_time="2026-11-21T01:02:03,456Z")),
        Reason.BAD_ARRIVAL_TIME,
        None,
    ),
    (
        "10 fraction digits",
        line(rec(627, arrival_time="2026-11-21T01:02:03.1234567891Z")),
        Reason.BAD_ARRIVAL_TIME,
        None,
    ),
    ("no seconds", line(rec(628, arrival_time="2026-11-21T01:02Z")), Reason.BAD_ARRIVAL_TIME, None),
    ("offset +0100", line(rec(629, arrival_time="2026-11-21T02:02:03+0100")), Reason.BAD_ARRIVAL_TIME, None),
    # base64: padding bits zero, so that the bytes have one form
    ("base64 YR==", line(rec(631, data=..., data_base64="YR==")), Reason.BAD_PAYLOAD, None),
    ("base64 YWJ=", line(rec(632, data=..., data_base64="YWJ=")), Reason.BAD_PAYLOAD, None),
    (
        "format 1 base64 YR==",
        line(rec_v1(633, payload=..., payload_base64="YR==")),
        Reason.BAD_PAYLOAD,
        None,
    ),
    # detail names every missing (or wrongly typed) field, in the order of the format's table
    (
        "no shard_id, no epoch",
        line(rec(651, epoch=..., shard_id=...)),
        Reason.MISSING_FIELD,
        "shard_id, epoch",
    ),
    (
        "epoch null, no partition key, no stream",
        line(rec(652, epoch=None, partition_key=..., stream=...)),
        Reason.MISSING_FIELD,
        "stream, partition_key, epoch",
    ),
    ("epoch and stream wrong", line(rec(653, epoch="3", stream=5)), Reason.WRONG_TYPE, "stream, epoch"),
]

#: (case, line, sequence number): lines the contract keeps that look close to the ones above.
CURATED: list[tuple[str, str, str]] = [
    ("format 1 (no v)", line(rec_v1(110)), "110"),
    ("data nested 500 deep", line(rec(210, data="[" * 500 + "]" * 500)), "210"),
    ("a key of 10,000 characters", line(rec(211, data=f'{{"{"k" * 10_000}": 1}}')), "211"),
    (
        "a key of 10,000 escaped characters and surrogate pairs",
        line(rec(212, data=f'{{"{K * 9_999}\\ud83d\\ude00": 1}}')),
        "212",
    ),
    ("a string of 20,000 characters", line(rec(213, data=json.dumps({"s": "k" * 20_000, "t": ":"}))), "213"),
    ("brackets inside strings", line(rec(214, data=json.dumps(["[" * 600, "{" * 600]))), "214"),
    ("epoch 2^63 - 1", _replace(rec(608), '"epoch":3', f'"epoch":{2**63 - 1}'), "608"),
    ("format 1 payload null", line(rec_v1(614, payload=None)), "614"),
    # the other format's payload members are unknown fields: ignored, never the payload (nor its event id)
    ("format 1 with a data member", line(rec_v1(615, data=json.dumps({"event_id": "e-616"}))), "615"),
    ("format 2 with a payload_base64 member", line(rec(616, payload_base64="YQ==")), "616"),
    ("4 fraction digits", line(rec(641, arrival_time="2026-11-21T01:02:03.4567Z")), "641"),
    ("9 fraction digits", line(rec(642, arrival_time="2026-11-21T01:02:03.123456789Z")), "642"),
    ("no fraction, an offset", line(rec(643, arrival_time="2026-11-21T03:02:03+02:00")), "643"),
    ("base64 YQ==", line(rec(634, data=..., data_base64="YQ==")), "634"),
    ("base64 YWI=", line(rec(635, data=..., data_base64="YWI=")), "635"),
]

#: Payloads for --payload-columns and --event-id-field: sequence number -> data.
PAYLOADS: dict[int, str] = {
    # 4. a JSON string is no number
    401: '{"event_id": "e-401", "amount": "0.5", "ratio": "NaN", "n": "42", "flag": "true", "sku": 5}',
    402: '{"event_id": "e-402", "amount": 0.12345678901234567890, "ratio": 0.5, "n": 42, "flag": true, "sku": "a"}',
    # 5. event ids: exact digits; retries collapse, distinct ids do not
    501: f'{{"event_id": {BIG}}}',
    502: f'{{"event_id": {BIG + 1}}}',
    503: f'{{"event_id": {BIG}, "retry": true}}',  # a producer retry of 501: dropped
    504: '{"event_id": {"a": 1}}',  # objects, booleans and fractions are no event ids: both kept
    505: '{"event_id": {"a": 1}}',
    506: '{"event_id": true}',
    507: '{"event_id": true}',
    508: '{"event_id": 1.5}',
    509: '{"event_id": 1.5}',
    510: '{"event_id": "42"}',  # the string "42" and the number 42 are one event id, "42"
    511: '{"event_id": 42}',
    512: '{"event_id": -0}',
    513: '{"event_id": null}',
}


def _objects(raw: Path) -> list[str]:
    """Every case's lines, in three objects of hour 01; returns the lines of the BOM object."""
    quarantined = [text for _, text, _, _ in QUARANTINED]
    curated = [text for _, text, _ in CURATED]
    payloads = [line(record(sequence_number=str(seq), data=data)) for seq, data in PAYLOADS.items()]
    formats_1 = [
        line(record_v1(sequence_number="661", payload={"a": 10**37 + 1, "b": BIG, "c": 0.1, "d": 1e20})),
        line(record_v1(sequence_number="662", payload={"event_id": BIG + 2})),
    ]
    write_object(raw, "shardId-000000000001_a.jsonl.gz", [*quarantined, *curated, *payloads, *formats_1])
    # a byte-order mark at the start of an object, one at the start of a later line; no \n after the last
    bom_lines = [line(rec(671)), "\ufeff" + line(rec(672)), line(rec(673))]
    path = raw / "stream=orders" / HOUR / "shardId-000000000001_bom.jsonl.gz"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + "\n".join(bom_lines).encode()))
    return bom_lines


@pytest.fixture(scope="module")
def contract_run(spark, tmp_path_factory) -> dict[str, Any]:
    """One run of the job's entry over every case (what ``spark-submit compact.py`` runs)."""
    lake = tmp_path_factory.mktemp("contract")
    bom_lines = _objects(lake / "raw")
    argv = ["--input", str(lake / "raw"), "--output", str(lake / "curated")]
    argv += ["--quarantine", str(lake / "quarantine"), "--start", "2026-11-21T01", "--end", "2026-11-21T01"]
    argv += ["--event-id-field", "event_id"]
    argv += ["--payload-columns", "amount DECIMAL(38,20), ratio DOUBLE, n BIGINT, flag BOOLEAN, sku STRING"]
    summary = _main(argv)
    curated = {r.sequence_number: r for r in spark.read.parquet(str(lake / "curated")).collect()}
    quarantine = spark.read.json(str(lake / "quarantine")).collect()
    return {"summary": summary, "curated": curated, "quarantine": quarantine, "bom_lines": bom_lines}


def _main(argv: list[str]) -> dict[str, Any]:
    """``compact.main`` as spark-submit runs it, in this process's Spark session; its JSON summary."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert compact.main(argv) == 0
    [summary] = [json.loads(x) for x in out.getvalue().splitlines() if x.startswith('{"')]
    return summary


def _quarantined_row(run: dict[str, Any], text: str | bytes) -> Any:
    if isinstance(text, bytes):
        [row] = [r for r in run["quarantine"] if r.line_base64 and base64.b64decode(r.line_base64) == text]
    else:
        [row] = [r for r in run["quarantine"] if r.line == text]
    return row


@pytest.mark.parametrize(("case", "text", "reason", "field"), QUARANTINED, ids=[c[0] for c in QUARANTINED])
def test_quarantined_with_its_reason(contract_run, case, text, reason, field):
    row = _quarantined_row(contract_run, text)
    assert row.reason == reason, case
    if reason == Reason.MISSING_FIELD:
        assert row.detail == f"missing or null: {field}"
    elif reason == Reason.WRONG_TYPE:
        assert row.detail == f"wrong JSON type: {field}"


@pytest.mark.parametrize(("case", "text", "seq"), CURATED, ids=[c[0] for c in CURATED])
def test_curated_as_it_is(contract_run, case, text, seq):
    row = contract_run["curated"][seq]
    raw = json.loads(text)
    if "v" in raw:
        assert (row.payload, row.payload_base64) == (raw.get("data"), raw.get("data_base64")), case
    else:
        assert json.loads(row.payload) == raw["payload"] and row.payload_base64 is None, case


def test_counts_add_up(contract_run):
    summary = contract_run["summary"]
    expected = {reason: sum(1 for *_, r, _ in QUARANTINED if r == reason) for reason in REASONS}
    expected[Reason.UNPARSEABLE] += 1  # the line starting with a byte-order mark
    assert {reason: summary[reason] for reason in REASONS} == expected
    assert summary["malformed"] == len(QUARANTINED) + 1 == len(contract_run["quarantine"])
    assert summary["duplicates"] == 2  # 503 (a retry of 501) and 511 (42, as "42" in 510)
    assert summary["curated"] == len(contract_run["curated"]) == summary["valid"] - 2


def test_line_base64_is_strict_base64(contract_run):
    row = _quarantined_row(contract_run, NOT_UTF8)
    assert len(row.line_base64) > 76  # long enough for Spark's MIME line breaks
    assert base64.b64decode(row.line_base64, validate=True) == NOT_UTF8


def test_a_json_string_is_no_number_in_a_typed_column(contract_run):
    curated = contract_run["curated"]
    as_strings, as_values = curated["401"], curated["402"]
    assert (as_strings.amount, as_strings.ratio, as_strings.n, as_strings.flag, as_strings.sku) == (
        None,
        None,
        None,
        None,
        "5",  # a STRING column of a number gives its text
    )
    assert (as_values.amount, as_values.ratio, as_values.n, as_values.flag, as_values.sku) == (
        Decimal("0.12345678901234567890"),
        0.5,
        42,
        True,
        "a",
    )


def test_event_ids_are_compared_exactly(contract_run):
    curated = contract_run["curated"]
    event_ids = {seq: curated[str(seq)].event_id for seq in PAYLOADS if str(seq) in curated}
    assert event_ids == {
        401: "e-401",
        402: "e-402",
        501: str(BIG),  # not 1.2345678901234568E39
        502: str(BIG + 1),  # a distinct event, kept
        504: None,
        505: None,
        506: None,
        507: None,
        508: None,
        509: None,
        510: "42",
        512: "0",
        513: None,
    }
    assert curated["662"].event_id == str(BIG + 2)  # format 1 too


def test_format_1_numbers_beyond_a_double(contract_run):
    """Format 1 comes out as canonical JSON of the parsed value: up to 38 digits exactly, beyond as a double."""
    row = contract_run["curated"]["661"]
    assert (
        row.payload
        == '{"a":10000000000000000000000000000000000001,"b":1.2345678901234568E39,"c":0.1,"d":1.0E20}'
    )


def test_fraction_digits_are_truncated_to_microseconds(contract_run):
    curated = contract_run["curated"]
    assert curated["641"].arrival_time == ts("2026-11-21T01:02:03.456700")
    assert curated["642"].arrival_time == ts("2026-11-21T01:02:03.123456")
    assert curated["643"].arrival_time == ts("2026-11-21T01:02:03")


def test_a_byte_order_mark_and_the_last_line(contract_run):
    """A BOM at the start of an object is skipped; one at the start of a later line makes it unparseable. The
    object's last line needs no \\n."""
    first, second, _ = contract_run["bom_lines"]
    assert {"671", "673"} <= set(contract_run["curated"])
    assert "672" not in contract_run["curated"]
    assert _quarantined_row(contract_run, second).reason == Reason.UNPARSEABLE
    assert first not in {r.line for r in contract_run["quarantine"]}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_run_with_a_wrong_input_keeps_curated_and_quarantine(spark, lake):
    write_object(lake / "raw", "s_1.jsonl.gz", [line(rec(1)), "not json"])
    write_object(lake / "elsewhere", "s_1.jsonl.gz", [line(rec(2))], hour="date=2026-11-21/hour=02")
    outputs = ["--output", str(lake / "curated"), "--quarantine", str(lake / "quarantine")]
    window = ["--start", "2026-11-21T00", "--end", "2026-11-21T03"]
    assert _main(["--input", str(lake / "raw"), *outputs, *window])["malformed"] == 1
    before = {name: _snapshot(lake / name) for name in ("curated", "quarantine")}
    assert before["quarantine"]

    for wrong in (lake / "no such root", lake / "elsewhere"):  # nothing at all; nothing in hour 01
        _main(["--input", str(wrong), *outputs, *window])
        after = {name: _snapshot(lake / name) for name in ("curated", "quarantine")}
        assert {k: v for k, v in after["quarantine"].items() if "hour=01" in k} == before["quarantine"]
        assert {k: v for k, v in after["curated"].items() if "hour=01" in k} == before["curated"]
