"""A KPL user record's explicit hash key survives the dead-letter queue: the writer puts it in the body (only
when the record has one), the reader reads it back (a body without it, as every message written before it was
added, still is a dead letter), and ``redrive`` puts the record back with ``ExplicitHashKey`` (shown by its dry
run); a hash key Kinesis would refuse makes the message ``NotADeadLetter``."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

from consumer.admin.dead_letters import NotADeadLetter, parse_dead_letter
from consumer.admin.redrive import Redrive
from consumer.records import Record
from consumer.sinks.dlq import dead_letter_body
from tests.unit.test_redrive_engine import FakeKinesis, FakeSqs

HASH_KEY = str(2**127 + 5)


def _record(sub: int = 1, hash_key: str | None = HASH_KEY) -> Record:
    return Record(
        "orders",
        "shardId-000000000001",
        "49650001112223334445556667778889990001",
        sub,
        "pk-6",
        b"poison",
        datetime(2026, 11, 28, tzinfo=UTC),
        aggregated=True,
        explicit_hash_key=hash_key,
    )


def _body(record: Record) -> str:
    return json.dumps(dead_letter_body(record, RuntimeError("boom"), 3))


def test_the_body_carries_the_hash_key_only_when_the_record_has_one() -> None:
    assert dead_letter_body(_record(), RuntimeError("x"), 1)["explicit_hash_key"] == HASH_KEY
    assert "explicit_hash_key" not in dead_letter_body(_record(hash_key=None), RuntimeError("x"), 1)
    assert parse_dead_letter(_body(_record())).explicit_hash_key == HASH_KEY


def test_a_body_without_the_hash_key_is_still_a_dead_letter() -> None:
    old = dead_letter_body(_record(hash_key=None), RuntimeError("x"), 1)
    assert parse_dead_letter(json.dumps(old)).explicit_hash_key is None
    assert parse_dead_letter(json.dumps({**old, "explicit_hash_key": None})).explicit_hash_key is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (5, "field 'explicit_hash_key' must be a string (a int)"),
        ("", "is not a decimal hash key"),
        ("12a", "is not a decimal hash key"),
        ("-1", "is not a decimal hash key"),
        ("007", "is not a decimal hash key"),
        ("\u0663", "is not a decimal hash key"),  # an Arabic-Indic digit: isdigit(), not for Kinesis
        (str(2**128), "is above 2^128 - 1"),
        ("9" * 5000, "is above 2^128 - 1"),  # longer than int() converts: still a reason
    ],
    ids=["int", "empty", "letter", "negative", "leading-zero", "non-ascii-digit", "2^128", "5000-digits"],
)
def test_a_hash_key_kinesis_would_refuse_is_not_a_dead_letter(value: object, reason: str) -> None:
    body = {**dead_letter_body(_record(), RuntimeError("x"), 1), "explicit_hash_key": value}
    with pytest.raises(NotADeadLetter) as caught:
        parse_dead_letter(json.dumps(body))
    assert reason in str(caught.value)


def test_redrive_puts_the_hash_key_back_and_its_dry_run_shows_it() -> None:
    with_key, without = _body(_record(sub=1)), _body(_record(sub=2, hash_key=None))
    kinesis = FakeKinesis()
    Redrive(FakeSqs([with_key, without]), kinesis, "http://q", out=io.StringIO()).run()
    [entries] = kinesis.calls
    assert entries == [
        {"Data": b"poison", "PartitionKey": "pk-6", "ExplicitHashKey": HASH_KEY},
        {"Data": b"poison", "PartitionKey": "pk-6"},
    ]

    out = io.StringIO()
    Redrive(FakeSqs([with_key, without]), FakeKinesis(), "http://q", out=out, dry_run=True).run()
    first, second = out.getvalue().splitlines()[:2]
    assert f"partition key 'pk-6' explicit hash key {HASH_KEY} 6 bytes" in first
    assert "partition key 'pk-6' 6 bytes" in second and "hash key" not in second
