"""Inside a KPL aggregate every user record shares the sequence number: the failure logs of a single record
(``processor_failed`` for its own attempts, ``dead_letter_failed`` when the DLQ refuses it) name its
sub-sequence number too, as ``dead_lettered`` and ``shard_halted`` do; the batch's attempts name no record."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from consumer.config import ProcessingConfig
from consumer.lifecycle.delivery import DeliveryOutcome, deliver
from consumer.metrics.sink import InMemoryMetrics
from consumer.records import Record

SEQ = "49650001112223334445556667778889990001"


def _aggregate(n: int) -> list[Record]:
    """The ``n`` user records of one aggregate: one sequence number, sub-sequences 0 to n - 1."""
    at = datetime(2026, 11, 28, tzinfo=UTC)
    return [
        Record("s", "shardId-000000000000", SEQ, i, "pk", b"poison" if i == 2 else b"ok", at, aggregated=True)
        for i in range(n)
    ]


def _fail_on_poison(records: Sequence[Record]) -> None:
    if any(r.data == b"poison" for r in records):
        raise ValueError("poison")


class BrokenDlq:
    def send(self, record: Record, error: BaseException, epoch: int) -> None:
        raise RuntimeError("the queue is gone")


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_the_failure_logs_of_a_user_record_name_its_sub_sequence(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="consumer.lifecycle.delivery")
    cfg = ProcessingConfig(
        max_attempts=2, backoff_base=0.001, backoff_max=0.001, on_failure="dlq", dlq_url="q"
    )
    result = deliver(
        _aggregate(4), _fail_on_poison, cfg, BrokenDlq(), 1, threading.Event(), InMemoryMetrics()
    )
    assert result.outcome is DeliveryOutcome.HALT and result.failed_record is not None
    assert result.failed_record.sub_sequence_number == 2

    failed = _events(caplog, "processor_failed")
    batch = [r for r in failed if r.__dict__["what"] == "batch"]
    single = [r for r in failed if r.__dict__["what"] == SEQ]
    assert len(batch) == 2 and len(single) == 2  # the batch's attempts, then the poison record's own
    assert all("sub_sequence" not in r.__dict__ for r in batch)  # a batch is no one record
    assert [r.__dict__["sub_sequence"] for r in single] == [2, 2]

    [refused] = _events(caplog, "dead_letter_failed")
    assert (refused.__dict__["sequence"], refused.__dict__["sub_sequence"]) == (SEQ, 2)
