"""``consumer.admin.redrive.Redrive`` on the fakes of ``test_redrive_engine``, for what the emulators cannot show
in seconds: bad messages that come back again and again (their visibility ran out in a long run) neither end
the run before the dead letters behind them nor keep it going for ever; Kinesis unreachable after it took a
batch is retried, then ends the run with ``UnreachableError`` (exit 4), every message not put left."""

from __future__ import annotations

import io
from typing import Any

import pytest

from consumer.admin.redrive import Redrive
from consumer.errors import UnreachableError
from tests.unit.test_redrive_engine import FakeKinesis, FakeSqs, _body


class RecyclingSqs(FakeSqs):
    """Once its visible messages ran out, hands out the ones in ``recycle`` again, for ever (as SQS does when a
    run outlives the visibility timeout of messages it left)."""

    def __init__(self, bodies: list[str], recycle: list[int]) -> None:
        super().__init__(bodies)
        self.recycle = [(f"m{i}", bodies[i]) for i in recycle]
        self.receives = 0

    def receive_message(self, MaxNumberOfMessages: int, **kw: Any) -> dict[str, Any]:
        self.receives += 1
        out = super().receive_message(MaxNumberOfMessages, **kw)
        if not out["Messages"]:
            take = self.recycle[:MaxNumberOfMessages]
            self.recycle = self.recycle[MaxNumberOfMessages:] + take
            out["Messages"] = [{"MessageId": i, "ReceiptHandle": f"r-{i}", "Body": b} for i, b in take]
        return out


def test_bad_messages_that_keep_coming_back_end_the_run_after_the_dead_letters_behind_them() -> None:
    bodies = [f"not json {i}" for i in range(25)] + [_body(i) for i in range(5)]
    sqs = RecyclingSqs(bodies, recycle=list(range(25)))
    kinesis = FakeKinesis()
    out = io.StringIO()
    redrive = Redrive(sqs, kinesis, "http://q", out=out, sleep=lambda _: None)
    summary = redrive.run()
    assert (summary.put, summary.deleted, summary.skipped) == (5, 5, 25)
    assert sorted(sqs.deleted) == [f"m{i}" for i in range(25, 30)]
    assert out.getvalue().count("skipped message ") == 25  # each once, however often it came back
    assert sqs.receives <= 3 + 1 + 3  # the 30, nothing new, then the 25 once more at most


class FlakyKinesis(FakeKinesis):
    """Takes the first call, then cannot be reached."""

    def put_records(self, StreamName: str, Records: list[dict[str, Any]]) -> dict[str, Any]:
        if self.calls:
            self.calls.append(Records)
            raise UnreachableError("cannot reach Kinesis at http://k (put records): EndpointConnectionError")
        return super().put_records(StreamName, Records)


def test_kinesis_unreachable_after_a_batch_is_retried_then_ends_the_run_leaving_the_rest() -> None:
    sqs = FakeSqs([_body(i, b"x" * 600_000) for i in range(12)])  # 8 a batch (5 MiB): two batches
    kinesis = FlakyKinesis()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    out = io.StringIO()
    redrive = Redrive(sqs, kinesis, "http://q", out=out, sleep=sleep, clock=lambda: now[0])
    with pytest.raises(UnreachableError, match="cannot reach Kinesis"):
        redrive.run()
    assert len(kinesis.calls) > 2 and now[0] >= 60  # retried with backoff first
    assert "did not take it" not in out.getvalue()
    s = redrive.summary
    assert (s.put, s.deleted, s.skipped, s.pending, s.left, s.complete) == (8, 8, 0, 4, 4, False)
    assert sorted(sqs.restored) == sorted(f"m{i}" for i in range(8, 12))  # visible again at once
