"""``consumer.admin.redrive.Redrive`` on in-memory SQS and Kinesis fakes, for the answers the emulators never
give: a record Kinesis refuses for good (a KMS key) is never deleted; a failed delete is reported; a message
SQS delivers twice is put once; batches keep PutRecords' limits (500 records, 5 MiB)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

from consumer.admin.redrive import MAX_BATCH_BYTES, MAX_BATCH_RECORDS, Redrive
from consumer.records import Record
from consumer.sinks.dlq import dead_letter_body


def _body(i: int, data: bytes = b"x") -> str:
    record = Record("orders", "shardId-000000000000", str(1000 + i), 0, f"pk-{i}", data, datetime.now(UTC))
    return json.dumps(dead_letter_body(record, RuntimeError("boom"), 1))


class FakeSqs:
    """A queue of (id, body); receive hands out what is visible, 10 at most; ``again`` are delivered twice."""

    def __init__(self, bodies: list[str], again: frozenset[int] = frozenset()) -> None:
        self.visible = [(f"m{i}", b) for i, b in enumerate(bodies)]
        self.again = [(f"m{i}", bodies[i]) for i in sorted(again)]
        self.deleted: list[str] = []
        self.fail_delete: set[str] = set()
        self.restored: list[str] = []

    def receive_message(self, MaxNumberOfMessages: int, **_: Any) -> dict[str, Any]:
        take, self.visible = self.visible[:MaxNumberOfMessages], self.visible[MaxNumberOfMessages:]
        if not take and self.again:  # SQS's at-least-once: a message already handed out, once more
            take, self.again = self.again, []
        return {"Messages": [{"MessageId": i, "ReceiptHandle": f"r-{i}", "Body": b} for i, b in take]}

    def delete_message_batch(self, Entries: list[dict[str, str]], **_: Any) -> dict[str, Any]:
        assert len(Entries) <= 10
        ok, failed = [], []
        for e in Entries:
            message_id = e["ReceiptHandle"].removeprefix("r-")
            if message_id in self.fail_delete:
                failed.append({"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "Message": "expired"})
            else:
                self.deleted.append(message_id)
                ok.append({"Id": e["Id"]})
        return {"Successful": ok, "Failed": failed}

    def change_message_visibility_batch(self, Entries: list[dict[str, Any]], **_: Any) -> dict[str, Any]:
        self.restored += [e["ReceiptHandle"].removeprefix("r-") for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}


class FakeKinesis:
    """Takes every record but those whose partition key is in ``refuse`` (refused with that code)."""

    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        self.refuse = refuse or {}
        self.calls: list[list[dict[str, Any]]] = []

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Records)
        out = []
        for r in Records:
            code = self.refuse.pop(r["PartitionKey"], None) if r["PartitionKey"] in self.refuse else None
            if code == "KMSAccessDeniedException":
                self.refuse[r["PartitionKey"]] = code  # refused for good
            out.append({"ErrorCode": code, "ErrorMessage": "no"} if code else {"SequenceNumber": "1"})
        return {"Records": out, "FailedRecordCount": sum("ErrorCode" in o for o in out)}


def _run(sqs: FakeSqs, kinesis: FakeKinesis) -> tuple[Redrive, str]:
    out = io.StringIO()
    redrive = Redrive(sqs, kinesis, "http://q", out=out, sleep=lambda _: None)
    redrive.run()
    return redrive, out.getvalue()


def test_a_record_kinesis_refuses_for_good_is_not_deleted_and_a_throttled_one_is_put_again() -> None:
    sqs = FakeSqs([_body(i) for i in range(3)])
    kinesis = FakeKinesis(
        {"pk-1": "KMSAccessDeniedException", "pk-2": "ProvisionedThroughputExceededException"}
    )
    redrive, out = _run(sqs, kinesis)
    assert sorted(sqs.deleted) == ["m0", "m2"] and sqs.restored == ["m1"]
    assert (
        "skipped message m1: orders/shardId-000000000000@1001: Kinesis did not take it: KMSAccessDenied"
        in out
    )
    assert (redrive.summary.put, redrive.summary.throttled, redrive.summary.complete) == (2, 1, False)


def test_a_failed_delete_is_reported_and_a_message_delivered_twice_is_put_once() -> None:
    sqs = FakeSqs([_body(i) for i in range(3)], again=frozenset({0}))
    sqs.fail_delete = {"m2"}
    kinesis = FakeKinesis()
    redrive, out = _run(sqs, kinesis)
    assert sum(len(c) for c in kinesis.calls) == 3  # m0 once, though SQS handed it out twice
    assert sqs.deleted.count("m0") == 1 and "m0" not in sqs.restored
    assert "put but not deleted: message m2 (ReceiptHandleIsInvalid: expired)" in out
    assert (redrive.summary.put, redrive.summary.deleted, redrive.summary.complete) == (3, 2, False)


def test_batches_keep_putrecords_limits() -> None:
    big = b"x" * (1024 * 1024 - 10)  # with its key, just under 1 MiB: five make a full call
    sqs = FakeSqs([_body(i, big) for i in range(12)] + [_body(100 + i) for i in range(1100)])
    kinesis = FakeKinesis()
    redrive, _ = _run(sqs, kinesis)
    assert redrive.summary.put == redrive.summary.deleted == 1112
    for call in kinesis.calls:
        assert len(call) <= MAX_BATCH_RECORDS
        assert sum(len(r["Data"]) + len(r["PartitionKey"]) for r in call) <= MAX_BATCH_BYTES
