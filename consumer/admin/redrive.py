"""Putting dead-lettered records back into Kinesis: the engine of ``python -m consumer redrive``.

Each SQS message the worker dead-lettered (``consumer.sinks.dlq``) holds one record: its stream, shard,
sequence, partition key (and explicit hash key, when the producer routed the record by one), bytes and error.
``Redrive.run`` receives them 10 at a time, puts them back with PutRecords (up to 500 records and 5 MiB a call)
into their stream (or the one given) with their partition key, explicit hash key when there is one, and exact
bytes, and deletes a message (DeleteMessageBatch) only once Kinesis took its record. At least once:
a crash between a put and its delete puts that record again on the next run; a message is never lost.

Records Kinesis refuses one by one (throttled, ``InternalFailure``) are put again with capped exponential
backoff and jitter (``consumer.lifecycle.retry``); a whole call that is throttled is retried by the command
client (``consumer.aws.command_client``) and then here. A message that is not a dead letter of this
consumer is left in the queue and reported, and the run goes on to the messages behind it; so is one whose
record could not be put. Messages left so, and every message of a dry run, are made visible again at the end
(ChangeMessageVisibilityBatch), so the queue looks as it did before. Kinesis unreachable (at the first put,
or for ``give_up_after`` later on) ends the run with ``UnreachableError`` (exit 4), the messages not put left
in the queue.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TextIO

from consumer.admin.dead_letters import NotADeadLetter, parse_dead_letter
from consumer.admin.redrive_batch import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    VISIBILITY_TIMEOUT_S,
    Batch,
    Message,
    RedriveSummary,
    put_entry,
    refused_records,
)
from consumer.aws_errors import aws_call
from consumer.errors import ConsumerError, MissingResourceError, UnreachableError
from consumer.lifecycle.retry import Backoff, Verdict, next_try, verdict
from consumer.logs import log_event

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "VISIBILITY_TIMEOUT_S",
    "Redrive",
    "RedriveSummary",
]

logger = logging.getLogger(__name__)

_RECEIVE_WAIT_S = 1  # a receive that finds nothing within this long: the queue is empty
_BACKOFF = Backoff(base=0.2, cap=2.0, give_up_after=60.0)


class Redrive:
    """One pass over the dead-letter queue at ``queue_url`` (see the module's docstring). ``stream`` puts
    every record into that stream instead of the one it came from; ``limit`` stops after that many dead
    letters; ``dry_run`` prints what it would put and changes nothing."""

    def __init__(
        self,
        sqs: Any,
        kinesis: Any,
        queue_url: str,
        *,
        out: TextIO,
        stream: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sqs, self._kinesis, self._url = sqs, kinesis, queue_url
        self._out, self._stream, self._limit, self._dry_run = out, stream, limit, dry_run
        self._sleep, self._clock = sleep, clock
        self.summary = RedriveSummary()
        self._seen: dict[str, bool] = {}  # message id -> whether its record was put (this run)
        self._restore: dict[str, str] = {}  # message id -> receipt: made visible again at the end
        self._accepted: dict[str, Message] = {}  # every dead letter taken, by message id
        self._kinesis_down = False  # a put found Kinesis unreachable: the run ends (exit 4)
        self._reached = False  # Kinesis answered a put in this run (an unreachable one later is retried)

    def run(self) -> RedriveSummary:
        """Receive, put back and delete until the queue is empty (or ``limit``); returns the summary."""
        batch = Batch()
        taken = 0
        stale = 0  # messages met before, received since the last new one
        try:
            while self._limit is None or taken < self._limit:
                want = 10 if self._limit is None else min(10, self._limit - taken)
                received = self._receive(want)
                if not received:
                    break
                new = [raw for raw in received if str(raw["MessageId"]) not in self._seen]
                for raw in received:
                    message = self._accept(raw)
                    if message is None:  # met before, or not a dead letter (reported, left)
                        continue
                    taken += 1
                    if not batch.fits(message.letter):
                        self._flush(batch)
                        batch = Batch()
                    batch.messages.append(message)
                    batch.size += message.letter.size
                if new:  # progress, dead letters or not: the ones behind them come next
                    stale = 0
                    continue
                # Only messages met before: their visibility ran out (a run longer than the timeout) or SQS
                # delivered one twice. Each receive hides them again, so go on until as many as this run left
                # came back with nothing new among them: what is visible now is what this run left.
                stale += len(received)
                if stale >= max(1, len(self._seen) - self.summary.put):
                    break
            self._flush(batch)
        except UnreachableError:
            if self._kinesis_down:  # nothing more can be put: what was taken and not put stays in the queue
                self._leave_unput()
            raise
        finally:
            self._make_visible()
        return self.summary

    def _leave_unput(self) -> None:
        """Kinesis cannot be reached: every dead letter taken and not put back is left in the queue (visible
        again at the end, counted in ``pending``), not reported one by one."""
        for message_id, m in self._accepted.items():
            if not self._seen[message_id] and message_id not in self._restore:
                self._restore[message_id] = m.receipt
                self.summary.pending += 1

    def _receive(self, want: int) -> list[dict[str, Any]]:
        with aws_call("sqs", f"receive from {self._url}", "--queue"):
            out = self._sqs.receive_message(
                QueueUrl=self._url,
                MaxNumberOfMessages=want,
                WaitTimeSeconds=_RECEIVE_WAIT_S,
                VisibilityTimeout=VISIBILITY_TIMEOUT_S,
            )
        messages: list[dict[str, Any]] = out.get("Messages", [])
        return messages

    def _accept(self, raw: dict[str, Any]) -> Message | None:
        """The message as a dead letter to put back; None when met before or not a dead letter (reported)."""
        message_id, receipt = str(raw["MessageId"]), str(raw["ReceiptHandle"])
        if message_id in self._seen:  # SQS delivers a message again now and then (at least once)
            # Only the latest receipt handle surely deletes it (or makes it visible): keep that one.
            if message_id in self._restore:
                self._restore[message_id] = receipt
            if (met := self._accepted.get(message_id)) is not None:
                met.receipt = receipt
                if self._seen[message_id] and not self._dry_run:  # put already: delete it again, once
                    self._delete([met])
            return None
        try:
            letter = parse_dead_letter(str(raw.get("Body", "")))
        except NotADeadLetter as exc:
            self._seen[message_id] = False
            self._restore[message_id] = receipt
            self._skip(message_id, str(exc))
            return None
        self._seen[message_id] = False
        message = self._accepted[message_id] = Message(message_id, receipt, letter)
        return message

    def _skip(self, message_id: str, reason: str) -> None:
        self.summary.skipped += 1
        self._out.write(f"skipped message {message_id}: {reason}; left in the queue\n")
        self._out.flush()
        log_event(logger, "dead_letter_skipped", logging.WARNING, message_id=message_id, reason=reason)

    def _flush(self, batch: Batch) -> None:
        if not batch.messages:
            return
        ordered = sorted(  # each shard's records back in their order (within a batch)
            batch.messages,
            key=lambda m: (
                m.letter.stream,
                m.letter.shard_id,
                len(m.letter.sequence_number),
                m.letter.sequence_number,
                m.letter.sub_sequence_number,
            ),
        )
        if self._dry_run:
            for m in ordered:
                self._list(m)
            return
        by_stream: dict[str, list[Message]] = {}
        for m in ordered:
            by_stream.setdefault(self._stream or m.letter.stream, []).append(m)
        for stream, messages in by_stream.items():
            self._put_back(stream, messages)

    def _list(self, m: Message) -> None:
        letter = m.letter
        into = f" into {self._stream}" if self._stream else ""
        error = f"{letter.error_type}: {letter.error}" if letter.error_type else letter.error
        hash_key = f"explicit hash key {letter.explicit_hash_key} " if letter.explicit_hash_key else ""
        self._out.write(
            f"would put{into}: stream {letter.stream} shard {letter.shard_id} sequence "
            f"{letter.sequence_number}/{letter.sub_sequence_number} partition key {letter.partition_key!r} "
            f"{hash_key}{len(letter.data)} bytes; error {error[:200]!r}\n"
        )
        self.summary.listed += 1
        self._restore[m.message_id] = m.receipt

    def _put_back(self, stream: str, messages: list[Message]) -> None:
        try:
            refused, throttled = self._put(stream, messages)
        except MissingResourceError as exc:
            if self._stream is not None:  # checked before the run: it went away meanwhile
                raise
            for m in messages:
                self._restore[m.message_id] = m.receipt
                self._skip(
                    m.message_id,
                    f"{m.letter.where}: stream {stream!r} does not exist ({exc}); put it elsewhere with --stream",
                )
            return
        done = [m for m in messages if m.message_id not in refused]
        for m in messages:
            if m.message_id in refused:
                self._restore[m.message_id] = m.receipt
                self._skip(
                    m.message_id, f"{m.letter.where}: Kinesis did not take it: {refused[m.message_id]}"
                )
            else:
                self._seen[m.message_id] = True
        self.summary.put += len(done)
        self.summary.throttled += throttled
        deleted = self._delete(done)
        self.summary.deleted += deleted
        retried = f" ({throttled} throttled and put again)" if throttled else ""
        self._out.write(f"put {len(done)} records into {stream}{retried}; deleted {deleted} messages\n")
        self._out.flush()
        log_event(logger, "dead_letters_redriven", stream=stream, records=len(done), throttled=throttled)

    def _put(self, stream: str, messages: list[Message]) -> tuple[dict[str, str], int]:
        """Put every message's record into ``stream``, putting refused ones again while that may pass.
        Returns the records Kinesis would not take (message id -> why) and how many were throttled (once or
        more) on the way."""
        pending = list(messages)
        refused: dict[str, str] = {}
        throttled: set[str] = set()  # the messages whose record was refused for a rate limit
        failures = 0
        since: float | None = None
        progress = self._clock()  # when Kinesis last took one of them (or the start)
        setting = "--stream" if self._stream else f"the stream of the dead letters ({stream})"
        while pending:
            answer = self._call(stream, pending, setting)
            if isinstance(answer, ConsumerError):
                again, slow, why = pending, verdict(answer) is Verdict.BACK_OFF, str(answer)
            else:
                again, why, slowed = refused_records(pending, answer, refused)
                slow = bool(slowed)
                throttled |= slowed
            if not again:
                break
            now = self._clock()
            if len(again) < len(pending):  # progress: the failures so far were passing ones
                failures, since, progress = 0, None, now
            failures, since, delay = next_try(
                _BACKOFF, failures, since, now, throttled=slow, jitter=random.random()
            )
            if delay is None or now - progress >= _BACKOFF.give_up_after:
                if isinstance(answer, UnreachableError):  # that long: no later batch would fare better
                    self._kinesis_down = True
                    raise answer
                # Nothing taken for that long (throttled too: the messages' visibility would run out): left.
                for m in again:
                    refused[m.message_id] = f"not taken for {_BACKOFF.give_up_after:g}s (last: {why})"
                break
            self._sleep(delay)
            pending = again
        return refused, len(throttled)

    def _call(
        self, stream: str, pending: list[Message], setting: str
    ) -> list[dict[str, Any]] | ConsumerError:
        """One PutRecords of ``pending``: Kinesis's answer for each record, or the error that may pass it
        failed with. Raises one that does not pass, and ``UnreachableError`` while Kinesis has not answered
        once in this run (its endpoint is wrong or down, not a passing blip: exit 4)."""
        entries = [put_entry(m.letter) for m in pending]
        try:
            with aws_call("kinesis", f"put records into {stream!r}", setting):
                out = self._kinesis.put_records(StreamName=stream, Records=entries)
        except ConsumerError as exc:
            if verdict(exc) is Verdict.SURFACE:
                raise
            if isinstance(exc, UnreachableError) and not self._reached:
                self._kinesis_down = True
                raise
            log_event(logger, "redrive_put_failed", logging.WARNING, stream=stream, error=str(exc))
            return exc
        self._reached = True
        records: list[dict[str, Any]] = out["Records"]
        return records

    def _delete(self, messages: list[Message]) -> int:
        """Delete the messages (10 a call); returns how many SQS deleted, and reports any it did not."""
        deleted = 0
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            entries = [{"Id": str(i), "ReceiptHandle": m.receipt} for i, m in enumerate(chunk)]
            with aws_call("sqs", f"delete from {self._url}", "--queue"):
                out = self._sqs.delete_message_batch(QueueUrl=self._url, Entries=entries)
            deleted += len(out.get("Successful", []))
            for failed in out.get("Failed", []):
                m = chunk[int(failed["Id"])]
                self._out.write(
                    f"put but not deleted: message {m.message_id} ({failed.get('Code')}: "
                    f"{failed.get('Message', '')}); the next redrive puts its record again\n"
                )
        return deleted

    def _make_visible(self) -> None:
        """Messages left in the queue (and every one of a dry run): visible again now, not after the timeout."""
        items = list(self._restore.items())
        for start in range(0, len(items), 10):
            chunk = items[start : start + 10]
            entries = [
                {"Id": str(i), "ReceiptHandle": receipt, "VisibilityTimeout": 0}
                for i, (_, receipt) in enumerate(chunk)
            ]
            try:
                with aws_call("sqs", f"change visibility in {self._url}", "--queue"):
                    self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)
            except ConsumerError as exc:  # they come back after the timeout anyway: say so, go on
                self._out.write(
                    f"could not make {len(chunk)} messages visible again ({exc}); they are back in "
                    f"{VISIBILITY_TIMEOUT_S}s\n"
                )
