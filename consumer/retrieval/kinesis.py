"""The three-and-a-bit Kinesis calls the consumer uses, as a Protocol, and the boto3 adapter behind it.

Records as the calls return them, and how they become ``Record`` objects (KPL de-aggregation included), are
in :mod:`consumer.retrieval.wire_records`, re-exported here."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, cast

import aws_kinesis_agg.deaggregator  # noqa: F401 - puts the library's protobuf modules on the import path
from botocore.exceptions import ClientError

from consumer.aws_errors import PROVIDER_FAILURES, classify
from consumer.errors import ConsumerError, MissingResourceError, ThrottledError
from consumer.logs import log_event
from consumer.retrieval.wire_records import KPL_MAGIC, WireRecord, to_records

__all__ = [
    "KPL_MAGIC",
    "BotoKinesis",
    "ExpiredIteratorError",
    "FanOutApi",
    "GetRecordsResult",
    "KinesisApi",
    "ShardInfo",
    "StreamMissingError",
    "Subscription",
    "SubscriptionEvent",
    "ThrottledError",
    "WireRecord",
    "to_records",
]

logger = logging.getLogger(__name__)

_ACTIVE_WITHIN = 60.0  # seconds a registered stream consumer has to become ACTIVE (AWS: a few seconds)


def _code(exc: BaseException) -> str:
    """The AWS error code behind one of our errors ("" if none)."""
    cause = exc.__cause__
    return str(cause.response.get("Error", {}).get("Code", "")) if isinstance(cause, ClientError) else ""


class StreamMissingError(MissingResourceError):
    """Kinesis answered ResourceNotFoundException for a call that named ``stream``: it does not exist (or is
    not ACTIVE). Only this (never a timeout, a refused connection or a throttle) means the stream is gone."""

    def __init__(self, stream: str, message: str) -> None:
        super().__init__(message)
        self.stream = stream


class ExpiredIteratorError(ConsumerError):
    """The shard iterator expired (5 minutes): get a new one from the last delivered position."""

    retriable = True


@dataclass(frozen=True)
class ShardInfo:
    shard_id: str
    parent_shard_id: str | None
    adjacent_parent_shard_id: str | None
    ending_sequence: str | None  # set once the shard is closed
    # Where the shard starts: a shard of the same id in a stream created again under the same name starts
    # elsewhere (consumer/retrieval/discovery.py). None where the listing did not say.
    starting_sequence: str | None = None

    @property
    def parents(self) -> tuple[str, ...]:
        return tuple(p for p in (self.parent_shard_id, self.adjacent_parent_shard_id) if p)


@dataclass(frozen=True)
class GetRecordsResult:
    records: Sequence[WireRecord]
    next_iterator: str | None  # None: the closed shard is fully read (SHARD_END)
    millis_behind_latest: int | None


@dataclass(frozen=True)
class SubscriptionEvent:
    """One SubscribeToShard event."""

    records: Sequence[WireRecord]
    continuation_sequence: str | None  # None: the closed shard is fully read (SHARD_END)
    millis_behind_latest: int | None


class Subscription(Protocol):
    """An open SubscribeToShard event stream (it ends by itself after 5 minutes)."""

    def __iter__(self) -> Iterator[SubscriptionEvent]: ...

    def close(self) -> None: ...


class FanOutApi(Protocol):
    """The enhanced fan-out calls: a registered consumer and per-shard subscriptions."""

    def register_consumer(self, stream: str, name: str) -> str:
        """Register (or find) the stream consumer ``name``; return its ARN once ACTIVE."""
        ...

    def subscribe(
        self,
        consumer_arn: str,
        shard_id: str,
        position_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> Subscription: ...


class KinesisApi(Protocol):
    def list_shards(self, stream: str) -> list[ShardInfo]: ...

    def get_shard_iterator(
        self,
        stream: str,
        shard_id: str,
        iterator_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> str: ...

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult: ...


@contextmanager
def _translate(stream: str, call: str = "") -> Iterator[None]:
    """Provider errors as this package's (``classify``), with Kinesis's own meanings first: an expired
    iterator (get a new one) and a missing stream (how to create it). ``stream`` is "" for a call that
    names none (GetRecords, SubscribeToShard); ``call`` then says which it was."""
    try:
        yield
    except PROVIDER_FAILURES as exc:
        code = exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""
        if code == "ExpiredIteratorException":
            raise ExpiredIteratorError(f"{stream or call}: iterator expired") from exc
        # Kinesis's own words too: a ResourceNotFoundException about a shard or a position, not the stream,
        # says so there (kinesis-local answers one for a sequence number a shard does not hold).
        said = exc.response.get("Error", {}).get("Message", "") if isinstance(exc, ClientError) else ""
        said = f" (Kinesis: {code}: {said})" if said else ""
        if code == "ResourceNotFoundException" and not stream:
            raise MissingResourceError(
                f"Kinesis {call}: not found ({code}): its stream was deleted, or is not ACTIVE{said}"
            ) from exc
        if code == "ResourceNotFoundException":
            raise StreamMissingError(
                stream,
                f"Kinesis stream {stream!r} does not exist (or is not ACTIVE){said}. Create it with "
                f"`aws kinesis create-stream --stream-name {stream} --shard-count N` or deploy the "
                "streaming stack.",
            ) from exc
        raise classify(exc, "kinesis", stream or call) from exc


class BotoKinesis:
    """``KinesisApi`` over a boto3 Kinesis client; counts calls by operation."""

    def __init__(self, client: Any) -> None:
        self._c = client
        self.calls: dict[str, int] = {}

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    def list_shards(self, stream: str) -> list[ShardInfo]:
        shards: list[ShardInfo] = []
        kwargs: dict[str, Any] = {"StreamName": stream}
        with _translate(stream):
            while True:
                self._count("ListShards")
                out = self._c.list_shards(**kwargs)
                for s in out.get("Shards", []):
                    shards.append(
                        ShardInfo(
                            shard_id=s["ShardId"],
                            parent_shard_id=s.get("ParentShardId"),
                            adjacent_parent_shard_id=s.get("AdjacentParentShardId"),
                            ending_sequence=s.get("SequenceNumberRange", {}).get("EndingSequenceNumber"),
                            starting_sequence=s.get("SequenceNumberRange", {}).get("StartingSequenceNumber"),
                        )
                    )
                token = out.get("NextToken")
                if not token:
                    return shards
                kwargs = {"NextToken": token}

    def get_shard_iterator(
        self,
        stream: str,
        shard_id: str,
        iterator_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> str:
        kwargs: dict[str, Any] = {
            "StreamName": stream,
            "ShardId": shard_id,
            "ShardIteratorType": iterator_type,
        }
        if sequence is not None:
            kwargs["StartingSequenceNumber"] = sequence
        if timestamp is not None:
            kwargs["Timestamp"] = timestamp
        self._count("GetShardIterator")
        with _translate(stream):
            return str(self._c.get_shard_iterator(**kwargs)["ShardIterator"])

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        self._count("GetRecords")
        with _translate("", "GetRecords"):
            out = self._c.get_records(ShardIterator=iterator, Limit=limit)
        records = cast("list[WireRecord]", out.get("Records", []))  # used as they are: no copy per record
        return GetRecordsResult(records, out.get("NextShardIterator"), out.get("MillisBehindLatest"))

    def register_consumer(self, stream: str, name: str) -> str:
        """Find or register ``name``, then wait for it to be ACTIVE. A whole fleet may do this at once: a
        RegisterStreamConsumer refused because another worker's is under way (ResourceInUseException) is
        taken as registered, and DescribeStreamConsumer (20 a second per stream) is polled every 1-2 s,
        jittered, a throttled poll waiting longer. Any other failure (a throttled DescribeStreamSummary,
        ListStreamConsumers or RegisterStreamConsumer included) is raised for the caller's retry policy."""
        with _translate(stream):
            arn = self._c.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
            existing = {
                c["ConsumerName"] for c in self._c.list_stream_consumers(StreamARN=arn).get("Consumers", [])
            }
        if name not in existing:
            self._count("RegisterStreamConsumer")
            try:
                with _translate(stream):
                    self._c.register_stream_consumer(StreamARN=arn, ConsumerName=name)
            except ThrottledError as exc:
                if _code(exc) != "ResourceInUseException":
                    raise
                log_event(logger, "fanout_consumer_registered_meanwhile", stream=stream, consumer=name)
        deadline = time.monotonic() + _ACTIVE_WITHIN
        while time.monotonic() < deadline:
            try:
                with _translate(stream):
                    desc = self._c.describe_stream_consumer(StreamARN=arn, ConsumerName=name)[
                        "ConsumerDescription"
                    ]
            except ThrottledError:
                time.sleep(random.uniform(2.0, 4.0))
                continue
            except StreamMissingError:  # another worker's registration, not visible yet
                desc = {"ConsumerStatus": "CREATING"}
            if desc["ConsumerStatus"] == "ACTIVE":
                return str(desc["ConsumerARN"])
            time.sleep(random.uniform(1.0, 2.0))
        raise MissingResourceError(
            f"stream consumer {name!r} of {stream!r} did not become ACTIVE within {_ACTIVE_WITHIN:.0f} s"
        )

    def subscribe(
        self,
        consumer_arn: str,
        shard_id: str,
        position_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> Subscription:
        position: dict[str, Any] = {"Type": position_type}
        if sequence is not None:
            position["SequenceNumber"] = sequence
        if timestamp is not None:
            position["Timestamp"] = timestamp
        self._count("SubscribeToShard")
        with _translate("", f"SubscribeToShard {shard_id}"):
            return _BotoSubscription(
                self._c.subscribe_to_shard(
                    ConsumerARN=consumer_arn, ShardId=shard_id, StartingPosition=position
                ),
                shard_id,
            )


class _BotoSubscription:
    def __init__(self, response: dict[str, Any], shard_id: str) -> None:
        self._stream = response["EventStream"]
        self._shard = shard_id

    def __iter__(self) -> Iterator[SubscriptionEvent]:
        with _translate("", f"SubscribeToShard {self._shard}"):
            for event in self._stream:
                body = event.get("SubscribeToShardEvent")
                if body is None:
                    continue
                yield SubscriptionEvent(
                    cast("list[WireRecord]", body.get("Records", [])),
                    body.get("ContinuationSequenceNumber"),
                    body.get("MillisBehindLatest"),
                )

    def close(self) -> None:
        self._stream.close()
