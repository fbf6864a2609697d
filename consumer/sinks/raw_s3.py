"""The raw S3 sink: lands every record as gzip JSON lines, checkpointing only what is durably written.

Format (docs/data-format.md): ``<prefix>/stream=<s>/date=YYYY-MM-DD/hour=HH/<shard>_<firstseq>_<firstsub>_
<lastseq>_<lastsub>.jsonl.gz``, partitioned by the records' Kinesis arrival time. Buffers are kept per
arrival hour, so every copy of a record lands in the same partition, and keys are deterministic from the
bounds, so a re-delivered batch with the same bounds overwrites its object instead of duplicating it.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import logging
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from consumer.aws import shared_client
from consumer.errors import ConfigError, LeaseLostError
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseGuard,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.logs import log_event
from consumer.records import Record

__all__ = ["RawS3Sink", "encode_line", "object_key"]

logger = logging.getLogger(__name__)


def encode_line(record: Record, epoch: int) -> dict[str, Any]:
    """One raw line: payload as parsed JSON when the data is UTF-8 JSON, else base64."""
    out: dict[str, Any] = {
        "stream": record.stream,
        "shard_id": record.shard_id,
        "sequence_number": record.sequence_number,
        "sub_sequence_number": record.sub_sequence_number,
        "partition_key": record.partition_key,
        "arrival_time": record.approximate_arrival.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.")
        + f"{record.approximate_arrival.microsecond // 1000:03d}Z",
        "epoch": epoch,
    }
    try:
        out["payload"] = json.loads(record.data.decode("utf-8"))
    except ValueError:  # not UTF-8 (UnicodeDecodeError is a ValueError) or not JSON
        out["payload_base64"] = base64.b64encode(record.data).decode("ascii")
    return out


def _hour(record: Record) -> tuple[str, str]:
    t = record.approximate_arrival.astimezone(UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def object_key(prefix: str, records: Sequence[Record]) -> str:
    first, last = records[0], records[-1]
    date, hour = _hour(first)
    name = (
        f"{first.shard_id}_{first.sequence_number}_{first.sub_sequence_number}_"
        f"{last.sequence_number}_{last.sub_sequence_number}.jsonl.gz"
    )
    return f"{prefix.strip('/')}/stream={first.stream}/date={date}/hour={hour}/{name}"


@dataclass
class _Buffer:
    records: list[Record] = field(default_factory=list)
    size: int = 0
    born: float = field(default_factory=time.monotonic)


def _setting(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive finite number from ``name``, or a ``ConfigError`` naming it (checked when constructed)."""
    raw = env.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, f"must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"must be a positive number, got {raw!r}")
    return value


class RawS3Sink:
    """Record processor (one per shard). Settings: ``CONSUMER_RAW_BUCKET`` (required),
    ``CONSUMER_RAW_PREFIX`` (``raw``), ``RAW_MAX_BYTES`` (5 MiB), ``RAW_MAX_RECORDS`` (10,000),
    ``RAW_MAX_AGE_SECONDS`` (60)."""

    checkpoint_mode = "manual"  # records are done only once their object is written

    def __init__(
        self,
        client: Any = None,
        bucket: str | None = None,
        prefix: str | None = None,
        max_bytes: int | None = None,
        max_records: int | None = None,
        max_age: float | None = None,
    ) -> None:
        env = os.environ
        bucket = bucket or env.get("CONSUMER_RAW_BUCKET")
        if not bucket:
            raise ConfigError("CONSUMER_RAW_BUCKET", "the raw sink needs a bucket")
        self.bucket = bucket
        self.prefix = prefix or env.get("CONSUMER_RAW_PREFIX", "raw")
        self.max_bytes = max_bytes or int(_setting(env, "RAW_MAX_BYTES", 5 * 1024 * 1024))
        self.max_records = max_records or int(_setting(env, "RAW_MAX_RECORDS", 10000))
        self.max_age = max_age or _setting(env, "RAW_MAX_AGE_SECONDS", 60)
        self._client = client or shared_client("s3")
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._guard: LeaseGuard | None = None
        self._epoch = 0
        self.objects_written = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def initialize(self, data: InitializationInput) -> None:
        self._guard, self._epoch, self._shard = data.guard, data.epoch, data.shard_id
        threading.Thread(target=self._age_flusher, daemon=True, name=f"raw-{data.shard_id}").start()

    def process_records(self, data: ProcessRecordsInput) -> None:
        with self._lock:
            for r in data.records:
                buf = self._buffers.setdefault(_hour(r), _Buffer())
                buf.records.append(r)
                buf.size += len(r.data) + 200
                if buf.size >= self.max_bytes or len(buf.records) >= self.max_records:
                    self._write(_hour(r))

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        self._stop.set()
        self.flush()
        data.checkpointer.checkpoint()

    def shard_ended(self, data: ShardEndedInput) -> None:
        self._stop.set()
        self.flush()
        data.checkpointer.checkpoint()

    def lease_lost(self, data: LeaseLostInput) -> None:
        self._stop.set()
        with self._lock:
            dropped = sum(len(b.records) for b in self._buffers.values())
            self._buffers.clear()  # not ours to write any more; the next owner re-reads them
        log_event(logger, "raw_buffers_dropped", logging.WARNING, shard=data.shard_id, records=dropped)

    # -- writing -----------------------------------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            for hour in sorted(self._buffers):
                self._write(hour)

    def _age_flusher(self) -> None:
        while not self._stop.wait(min(1.0, self.max_age / 4)):
            try:
                with self._lock:
                    old = [h for h, b in self._buffers.items() if time.monotonic() - b.born >= self.max_age]
                    for hour in sorted(old):
                        self._write(hour)
            except LeaseLostError:
                return
            except Exception:
                logger.exception("raw age flush failed", extra={"event": "raw_flush_failed"})

    def _write(self, hour: tuple[str, str]) -> None:
        """Upload one hour's buffer (lock held), then mark its records done."""
        buf = self._buffers.get(hour)
        if buf is None or not buf.records:
            return
        body = io.BytesIO()
        with gzip.GzipFile(fileobj=body, mode="wb", mtime=0) as gz:  # mtime 0: same bytes on re-delivery
            for r in buf.records:
                gz.write(json.dumps(encode_line(r, self._epoch), separators=(",", ":")).encode() + b"\n")
        key = object_key(self.prefix, buf.records)
        if self._guard is not None:
            self._guard.ensure_valid()  # fenced: a zombie never writes a batch the new owner also writes
        self._client.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=body.getvalue(),
            ContentType="application/x-ndjson",
            ContentEncoding="gzip",
        )
        del self._buffers[hour]
        self.objects_written += 1
        log_event(logger, "raw_object_written", logging.DEBUG, key=key, records=len(buf.records))
        for r in buf.records:
            r.done()
