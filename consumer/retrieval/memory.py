"""An in-memory ``KinesisApi``: shards, puts, splits and merges, with closed shards ending in SHARD_END."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from consumer.retrieval.kinesis import (
    ExpiredIteratorError,
    GetRecordsResult,
    ShardInfo,
    StreamMissingError,
    SubscriptionEvent,
    ThrottledError,
    WireRecord,
)

__all__ = ["InMemoryKinesis"]


@dataclass
class _Shard:
    info: ShardInfo
    records: list[WireRecord] = field(default_factory=list)  # as GetRecords returns them
    closed: bool = False


class InMemoryKinesis:
    """Sequence numbers are global, increasing, 21+ digits (like the real ones, but shorter)."""

    def __init__(self) -> None:
        self._streams: dict[str, dict[str, _Shard]] = {}
        self._seq = 49_000_000_000_000_000_000
        self._lock = threading.Lock()
        self.expire_next: set[str] = set()  # shard ids whose next GetRecords raises ExpiredIterator
        self.busy_subscriptions: set[str] = set()  # shard ids whose next SubscribeToShard is refused once
        self.events_per_subscription = 20
        self.calls: dict[str, int] = {}

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    def create_stream(self, name: str, shards: int) -> None:
        """A stream of ``shards`` open shards (again, if one of that name existed: a new stream)."""
        with self._lock:
            self._streams[name] = {
                f"shardId-{i:012d}": _Shard(ShardInfo(f"shardId-{i:012d}", None, None, None, self._start()))
                for i in range(shards)
            }

    def age_out(self, stream: str, shard_id: str) -> None:
        """A closed shard past the stream's retention: gone from the listing, as Kinesis trims it."""
        with self._lock:
            shards = self._stream(stream)
            if not shards[shard_id].closed:
                raise ValueError(f"{shard_id} is open: only closed shards age out")
            del shards[shard_id]

    def delete_stream(self, name: str) -> None:
        with self._lock:
            self._stream(name)
            del self._streams[name]

    def _start(self) -> str:
        """A new shard's starting sequence number (under the lock)."""
        self._seq += 1
        return str(self._seq)

    def _stream(self, name: str) -> dict[str, _Shard]:
        if name not in self._streams:
            raise StreamMissingError(name, f"Kinesis stream {name!r} does not exist")
        return self._streams[name]

    def put(self, stream: str, shard_id: str, data: bytes, partition_key: str = "pk") -> str:
        with self._lock:
            shard = self._stream(stream)[shard_id]
            if shard.closed:
                raise ValueError(f"{shard_id} is closed")
            self._seq += 1
            seq = str(self._seq)
            shard.records.append(
                {
                    "SequenceNumber": seq,
                    "PartitionKey": partition_key,
                    "Data": data,
                    "ApproximateArrivalTimestamp": datetime.now(UTC),
                }
            )
            return seq

    def _close(self, shard: _Shard) -> None:
        shard.closed = True
        last = shard.records[-1]["SequenceNumber"] if shard.records else str(self._seq)
        shard.info = ShardInfo(
            shard.info.shard_id,
            shard.info.parent_shard_id,
            shard.info.adjacent_parent_shard_id,
            last,
            shard.info.starting_sequence,
        )

    def split(self, stream: str, shard_id: str) -> tuple[str, str]:
        with self._lock:
            shards = self._stream(stream)
            self._close(shards[shard_id])
            n = len(shards)
            kids = (f"shardId-{n:012d}", f"shardId-{n + 1:012d}")
            for kid in kids:
                shards[kid] = _Shard(ShardInfo(kid, shard_id, None, None, self._start()))
            return kids

    def merge(self, stream: str, shard_id: str, adjacent: str) -> str:
        with self._lock:
            shards = self._stream(stream)
            self._close(shards[shard_id])
            self._close(shards[adjacent])
            kid = f"shardId-{len(shards):012d}"
            shards[kid] = _Shard(ShardInfo(kid, shard_id, adjacent, None, self._start()))
            return kid

    def list_shards(self, stream: str) -> list[ShardInfo]:
        with self._lock:
            self._count("ListShards")
            return [s.info for s in self._stream(stream).values()]

    def get_shard_iterator(
        self,
        stream: str,
        shard_id: str,
        iterator_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> str:
        with self._lock:
            self._count("GetShardIterator")
            shard = self._stream(stream)[shard_id]
            if iterator_type == "TRIM_HORIZON":
                index = 0
            elif iterator_type == "LATEST":
                index = len(shard.records)
            elif iterator_type == "AT_TIMESTAMP":
                assert timestamp is not None
                index = next(
                    (i for i, r in enumerate(shard.records) if r["ApproximateArrivalTimestamp"] >= timestamp),
                    len(shard.records),
                )
            else:
                assert sequence is not None
                seqs = [int(r["SequenceNumber"]) for r in shard.records]
                target = int(sequence)
                index = next((i for i, s in enumerate(seqs) if s >= target), len(seqs))
                if iterator_type == "AFTER_SEQUENCE_NUMBER" and index < len(seqs) and seqs[index] == target:
                    index += 1
            return f"{stream}|{shard_id}|{index}"

    def get_records(self, iterator: str, limit: int) -> GetRecordsResult:
        with self._lock:
            self._count("GetRecords")
            stream, shard_id, raw_index = iterator.split("|")
            if shard_id in self.expire_next:
                self.expire_next.discard(shard_id)
                raise ExpiredIteratorError("iterator expired")
            shard = self._stream(stream)[shard_id]
            index = int(raw_index)
            batch = shard.records[index : index + limit]
            end = index + len(batch)
            at_end = shard.closed and end >= len(shard.records)
            behind = 0 if end >= len(shard.records) else 1000
            return GetRecordsResult(tuple(batch), None if at_end else f"{stream}|{shard_id}|{end}", behind)

    # -- enhanced fan-out -------------------------------------------------------------------------
    def register_consumer(self, stream: str, name: str) -> str:
        with self._lock:
            self._stream(stream)
            self._count("RegisterStreamConsumer")
            return f"arn:memory:{stream}/consumer/{name}"

    def subscribe(
        self,
        consumer_arn: str,
        shard_id: str,
        position_type: str,
        *,
        sequence: str | None = None,
        timestamp: datetime | None = None,
    ) -> _MemorySubscription:
        stream = consumer_arn.split(":", 2)[2].split("/consumer/", maxsplit=1)[0]
        with self._lock:
            self._count("SubscribeToShard")
            if shard_id in self.busy_subscriptions:
                self.busy_subscriptions.discard(shard_id)
                raise ThrottledError("ResourceInUseException")
        kind = "AFTER_SEQUENCE_NUMBER" if position_type == "AFTER_SEQUENCE_NUMBER" else position_type
        iterator = self.get_shard_iterator(stream, shard_id, kind, sequence=sequence, timestamp=timestamp)
        return _MemorySubscription(self, iterator, self.events_per_subscription)


class _MemorySubscription:
    """Pushes what GetRecords would return, as events; ends after ``limit`` events like a real one after 5 min."""

    def __init__(self, kinesis: InMemoryKinesis, iterator: str, limit: int) -> None:
        self._k = kinesis
        self._iterator: str | None = iterator
        self._limit = limit
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[SubscriptionEvent]:
        for _ in range(self._limit):
            if self._closed.is_set() or self._iterator is None:
                return
            result = self._k.get_records(self._iterator, 100)
            self._iterator = result.next_iterator
            last = result.records[-1]["SequenceNumber"] if result.records else None
            continuation = None if result.next_iterator is None else (last or self._continuation_of(result))
            yield SubscriptionEvent(result.records, continuation, result.millis_behind_latest)
            if not result.records:
                self._closed.wait(0.01)

    def _continuation_of(self, result: GetRecordsResult) -> str:
        """With no new records, continue after the last record of the shard read so far."""
        assert result.next_iterator is not None
        stream, shard_id, index = result.next_iterator.split("|")
        records = self._k._streams[stream][shard_id].records
        return records[int(index) - 1]["SequenceNumber"] if int(index) > 0 else "0"

    def close(self) -> None:
        self._closed.set()
