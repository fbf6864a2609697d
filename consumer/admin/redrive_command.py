"""``python -m consumer redrive``: put the dead-lettered records back into Kinesis and empty the queue.

Registered on the CLI here; the work is ``consumer.admin.redrive`` (imported when the command runs, so that
registering it costs every ``python -m consumer`` nothing).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from consumer.errors import ConfigError, MissingResourceError
from consumer.settings.streams import STREAM_NAME

__all__ = ["EXIT_LEFT", "add_redrive_command"]

#: The exit code of a redrive that left a message in the queue (not a dead letter, or not taken back).
EXIT_LEFT = 1
_QUEUE_VARIABLE = "CONSUMER_DLQ_URL"

_DESCRIPTION = """\
Receives the dead-letter queue's messages (10 at a time), puts each record back into the stream it was read
from (or --stream) with its partition key, its explicit hash key when the producer routed it by one (a KPL user
record), and exact bytes (PutRecords, up to 500 records / 5 MiB a call), and deletes a message only after
Kinesis took its record; stops when a receive finds the queue empty (after a 1 s wait), or after --max dead
letters. Records refused for a rate limit are put again with backoff.

At least once: a crash (or a failed delete) after a put and before its delete leaves the message in the
queue, and the next redrive puts that record again; a message is never deleted before its record is in
Kinesis. A message that is not a dead letter of this consumer (not JSON, a field missing) is left in the
queue and reported. Messages this run left, and every message of a --dry-run, are made visible again at the
end. The order of records is kept within each batch only.

Exit codes: 0 every dead letter put back and deleted; 1 a message was left in the queue (reported); 2 a bad
flag, or a missing queue or stream; 4 AWS unreachable (SQS, or Kinesis: the messages not put stay in the
queue). Needs sqs:ReceiveMessage, sqs:DeleteMessage,
sqs:ChangeMessageVisibility, sqs:GetQueueAttributes and kinesis:PutRecords (kinesis:DescribeStreamSummary
with --stream; kms:Decrypt on the key of a KMS-encrypted queue, as the deployed one is): an operator's
credentials, not the workers' task role."""


def _queue(args: argparse.Namespace) -> tuple[str, str]:
    """The queue URL and the setting that named it (``--queue``, else ``CONSUMER_DLQ_URL``)."""
    if args.queue is not None:
        url, setting = args.queue.strip(), "--queue"
        if not url:
            raise ConfigError("--queue", "must not be empty")
    else:
        url, setting = os.environ.get(_QUEUE_VARIABLE, "").strip(), _QUEUE_VARIABLE
        if not url:
            raise ConfigError(
                "--queue", f"is required (the dead-letter queue's URL; or set {_QUEUE_VARIABLE})"
            )
    if not url.startswith(("https://", "http://")):
        raise ConfigError(
            setting, f"must be an SQS queue URL (https://sqs.REGION.amazonaws.com/...), got {url!r}"
        )
    return url, setting


def _checked_flags(args: argparse.Namespace) -> tuple[str, str]:
    """The queue URL and the setting that named it, once every flag is checked (the local checks first)."""
    if args.max is not None and args.max < 1:
        raise ConfigError("--max", f"must be >= 1, got {args.max}")
    if args.stream is not None:
        args.stream = args.stream.strip()
        if not STREAM_NAME.fullmatch(args.stream):
            raise ConfigError(
                "--stream", f"must be a stream name (1-128 of a-z A-Z 0-9 _ . -), got {args.stream!r}"
            )
    return _queue(args)


def _check_queue(sqs: Any, url: str, setting: str) -> None:
    from consumer.aws_errors import aws_call

    with aws_call("sqs", f"queue {url}", setting):
        try:
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except sqs.exceptions.QueueDoesNotExist:
            raise MissingResourceError(f"{setting}: SQS queue {url!r} does not exist") from None


def _run(args: argparse.Namespace) -> int:
    url, setting = _checked_flags(args)
    from consumer.admin.redrive import Redrive
    from consumer.aws import command_client
    from consumer.preflight import check_credentials, check_stream

    check_credentials()
    sqs = command_client("sqs")
    _check_queue(sqs, url, setting)
    kinesis = command_client("kinesis")
    if args.stream is not None:
        check_stream(kinesis, args.stream, "--stream")
    redrive = Redrive(
        sqs, kinesis, url, out=sys.stdout, stream=args.stream, limit=args.max, dry_run=args.dry_run
    )
    try:
        summary = redrive.run()
    finally:  # also before an error's line: what was put back and deleted so far
        s = redrive.summary
        left = f"{s.left} left in the queue" + (
            f", {s.put - s.deleted} put but not deleted" if s.put > s.deleted else ""
        )
        if args.dry_run:
            print(f"dry run: {s.listed} records would be put back, {left}; nothing was put or deleted")
        else:
            throttled = f" ({s.throttled} throttled and put again)" if s.throttled else ""
            print(f"redrive: {s.put} records put back{throttled}, {s.deleted} messages deleted, {left}")
        sys.stdout.flush()
    return 0 if summary.complete else EXIT_LEFT


def add_redrive_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``redrive`` on the CLI."""
    p = sub.add_parser(
        "redrive",
        help="put the dead-letter queue's records back into their stream (at least once), then delete them",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--queue", metavar="URL", help="the dead-letter queue's URL (default: $CONSUMER_DLQ_URL)")
    p.add_argument(
        "--stream",
        metavar="S",
        help="put every record into this stream instead of its own (e.g. a retry stream)",
    )
    p.add_argument(
        "--max",
        type=int,
        metavar="N",
        help="stop after this many dead letters (default: until the queue is empty)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print each record it would put (stream, shard, sequence, partition key, explicit hash key "
        "when it has one, size, error); "
        "put and delete nothing",
    )
    p.set_defaults(func=_run)
