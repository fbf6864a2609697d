"""``python -m consumer redrive`` (a subprocess, against the emulators) past messages that are not dead letters,
and with Kinesis unreachable: a receive that brings back only bad messages does not end the run (the valid dead
letters behind them are put back and counted); Kinesis that cannot be reached ends it at once with exit 4 and
one line naming the endpoint setting, every message left in the queue and visible."""

from __future__ import annotations

import socket
import time
from collections import Counter
from typing import Any

import pytest

from tests.integration.support import create_stream
from tests.integration.test_redrive import (
    _dead_letter,
    _letters,
    _queue_counts,
    _redrive,
    _stream_records,
)

pytestmark = pytest.mark.integration


def _bad(sqs: Any, url: str, n: int, tag: str) -> set[str]:
    """``n`` messages that are not dead letters (not JSON); their message ids."""
    return {sqs.send_message(QueueUrl=url, MessageBody=f"not json {tag} {i}")["MessageId"] for i in range(n)}


def _skipped(stdout: str) -> Counter[str]:
    """How often each message id was reported as skipped."""
    return Counter(line.split()[2].rstrip(":") for line in stdout.splitlines() if line.startswith("skipped "))


@pytest.mark.parametrize("limit", [None, 3])
def test_dead_letters_behind_a_receive_of_bad_messages_are_put_back_and_counted(
    emulators, kinesis_client, sqs_client, unique_name, limit: int | None
) -> None:
    stream = unique_name("s")
    create_stream(kinesis_client, stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    bad = _bad(sqs_client, queue, 10, "a")  # a whole receive of them first
    first = _letters(12)
    _dead_letter(sqs_client, queue, stream, first)
    bad |= _bad(sqs_client, queue, 18, "b")
    last = [(f"last-{i}", b"behind the bad ones %d" % i) for i in range(5)]
    _dead_letter(sqs_client, queue, stream, last)

    args = ("--queue", queue) if limit is None else ("--queue", queue, "--max", str(limit))
    out = _redrive(emulators, *args)
    assert out.returncode == 1, out
    assert "Traceback" not in out.stderr
    if limit is None:
        assert _skipped(out.stdout) == Counter(bad)  # each bad one named, once
        assert "redrive: 17 records put back, 17 messages deleted, 28 left in the queue" in out.stdout
        assert Counter(_stream_records(kinesis_client, stream)) == Counter(first + last)
        assert _queue_counts(sqs_client, queue) == (28, 0)  # the bad ones, visible again at once
    else:
        assert "redrive: 3 records put back, 3 messages deleted, 10 left in the queue" in out.stdout
        assert len(_stream_records(kinesis_client, stream)) == 3
        assert _queue_counts(sqs_client, queue) == (42, 0)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kinesis_unreachable_exits_4_at_once_naming_the_endpoint_and_leaves_the_messages(
    emulators, kinesis_client, sqs_client, unique_name
) -> None:
    stream = unique_name("s")
    create_stream(kinesis_client, stream, 1)
    queue = sqs_client.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]
    _dead_letter(sqs_client, queue, stream, _letters(3))

    began = time.monotonic()
    out = _redrive(
        emulators,
        "--queue",
        queue,
        env={"AWS_ENDPOINT_URL_KINESIS": f"http://127.0.0.1:{_closed_port()}"},
    )
    assert time.monotonic() - began < 30, "not the 60 s of backoff per batch"
    assert out.returncode == 4, out
    assert "Traceback" not in out.stderr and "did not take it" not in out.stdout
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, out.stderr
    assert "cannot reach Kinesis" in errors[0] and "AWS_ENDPOINT_URL_KINESIS" in errors[0]
    assert "redrive: 0 records put back, 0 messages deleted, 3 left in the queue" in out.stdout
    assert _queue_counts(sqs_client, queue) == (3, 0)  # left, and visible again at once
