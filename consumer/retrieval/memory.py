"""An in-memory ``KinesisApi``: shards, puts, splits and merges, with closed shards ending in SHARD_END."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from consumer.errors import MissingResourceError
from consumer.retrieval.kinesis import ExpiredIteratorError, GetRecordsResult, RawRecord, ShardInfo

__all__ = ["InMemoryKinesis"]


@dataclass
class _Shard:
    info: ShardInfo
    records: list[RawRecord] = field(default_factory=list)
    closed: bool = False


class InMemoryKinesis:
    """Sequence numbers are global, increasing, 21+ digits (like the real ones, but shorter)."""

    def __init__(self) -> None:
        self._streams: dict[str, dict[str, _Shard]] = {}
        self._seq = 49_000_000_000_000_000_000
        self._lock = threading.Lock()
        self.expire_next: set[str] = set()  # shard ids whose next GetRecords raises ExpiredIterator
        self.calls: dict[str, int] = {}

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    def create_stream(self, name: str, shards: int) -> None:
        with self._lock:
            self._streams[name] = {
                f"shardId-{i:012d}": _Shard(ShardInfo(f"shardId-{i:012d}", None, None, None))
                for i in range(shards)
            }

    def _stream(self, name: str) -> dict[str, _Shard]:
        if name not in self._streams:
            raise MissingResourceError(f"Kinesis stream {name!r} does not exist")
        return self._streams[name]

    def put(self, stream: str, shard_id: str, data: bytes, partition_key: str = "pk") -> str:
        with self._lock:
            shard = self._stream(stream)[shard_id]
            if shard.closed:
                raise ValueError(f"{shard_id} is closed")
            self._seq += 1
            seq = str(self._seq)
            shard.records.append(RawRecord(seq, partition_key, data, datetime.now(UTC)))
            return seq

    def _close(self, shard: _Shard) -> None:
        shard.closed = True
        last = shard.records[-1].sequence_number if shard.records else str(self._seq)
        shard.info = ShardInfo(
            shard.info.shard_id, shard.info.parent_shard_id, shard.info.adjacent_parent_shard_id, last
        )

    def split(self, stream: str, shard_id: str) -> tuple[str, str]:
        with self._lock:
            shards = self._stream(stream)
            self._close(shards[shard_id])
            n = len(shards)
            kids = (f"shardId-{n:012d}", f"shardId-{n + 1:012d}")
            for kid in kids:
                shards[kid] = _Shard(ShardInfo(kid, shard_id, None, None))
            return kids

    def merge(self, stream: str, shard_id: str, adjacent: str) -> str:
        with self._lock:
            shards = self._stream(stream)
            self._close(shards[shard_id])
            self._close(shards[adjacent])
            kid = f"shardId-{len(shards):012d}"
            shards[kid] = _Shard(ShardInfo(kid, shard_id, adjacent, None))
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
                    (i for i, r in enumerate(shard.records) if r.approximate_arrival >= timestamp),
                    len(shard.records),
                )
            else:
                assert sequence is not None
                seqs = [int(r.sequence_number) for r in shard.records]
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
