"""What a redrive counts and sends: its summary, the dead letters of one PutRecords call, and the reading of
PutRecords' answer record by record (``consumer.admin.redrive`` runs the pass)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from consumer.admin.dead_letters import DeadLetter
from consumer.aws_errors import THROTTLE_CODES, is_throttle_code

__all__ = [
    "MAX_BATCH_BYTES",
    "MAX_BATCH_RECORDS",
    "VISIBILITY_TIMEOUT_S",
    "Batch",
    "Message",
    "RedriveSummary",
    "put_entry",
    "refused_records",
]

MAX_BATCH_RECORDS = 500  # PutRecords: records a call
MAX_BATCH_BYTES = 5 * 1024 * 1024  # PutRecords: data and partition keys a call
#: How long a received message stays hidden from other readers while its record is put back (and how long a
#: message that a crashed redrive had received stays hidden before it is visible again).
VISIBILITY_TIMEOUT_S = 120
# Per-record failures PutRecords reports that may pass when put again (others, e.g. KMS refusals, do not).
_RETRIED_CODES = THROTTLE_CODES | {"InternalFailure", "ServiceUnavailable"}


@dataclass
class RedriveSummary:
    """What one run did: records put back, messages deleted, messages skipped (left in the queue)."""

    put: int = 0
    deleted: int = 0
    skipped: int = 0
    throttled: int = 0  # records Kinesis refused for a rate limit and that were put again
    listed: int = 0  # dry run: records that would be put back
    pending: int = 0  # dead letters taken but not put: Kinesis could not be reached (left in the queue)

    @property
    def left(self) -> int:
        """Messages this run left in the queue: skipped (each reported) and pending."""
        return self.skipped + self.pending

    @property
    def complete(self) -> bool:
        """Every message seen was handled: none is left in the queue by this run."""
        return self.left == 0 and self.deleted == self.put


@dataclass
class Message:
    """A received dead letter: its SQS message id and receipt handle, and the record it holds."""

    message_id: str
    receipt: str
    letter: DeadLetter


@dataclass
class Batch:
    """Dead letters gathered for one PutRecords call."""

    messages: list[Message] = field(default_factory=list)
    size: int = 0

    def fits(self, letter: DeadLetter) -> bool:
        """Whether ``letter`` still fits in this call (records and bytes of a PutRecords call)."""
        return len(self.messages) < MAX_BATCH_RECORDS and self.size + letter.size <= MAX_BATCH_BYTES


def put_entry(letter: DeadLetter) -> dict[str, Any]:
    """The PutRecords entry of a dead letter: its bytes and partition key, and the explicit hash key the
    producer routed it by when it had one (so that it goes back into the shard the producer chose)."""
    entry: dict[str, Any] = {"Data": letter.data, "PartitionKey": letter.partition_key}
    if letter.explicit_hash_key is not None:
        entry["ExplicitHashKey"] = letter.explicit_hash_key
    return entry


def refused_records(
    pending: list[Message], results: list[dict[str, Any]], refused: dict[str, str]
) -> tuple[list[Message], str, set[str]]:
    """From a PutRecords answer: the records to put again, a code they were refused with and how many were
    throttled (their message ids); records refused for good go into ``refused`` (message id -> why)."""
    again: list[Message] = []
    why = ""
    throttled: set[str] = set()
    for m, result in zip(pending, results, strict=True):
        if not (code := result.get("ErrorCode")):
            continue
        if code in _RETRIED_CODES or is_throttle_code(code, "kinesis"):
            again.append(m)
            why = code
            if is_throttle_code(code, "kinesis"):
                throttled.add(m.message_id)
        else:  # e.g. a KMS key refused: putting it again would fail the same way
            refused[m.message_id] = f"{code}: {result.get('ErrorMessage', '')}"
    return again, why, throttled
