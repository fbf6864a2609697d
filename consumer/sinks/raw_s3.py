"""The raw S3 sink: lands every record as gzip JSON lines, checkpointing only what is durably written.

Format (docs/data-format.md): ``<prefix>/stream=<s>/date=YYYY-MM-DD/hour=HH/<shard>_<firstseq>_<firstsub>_
<lastseq>_<lastsub>.jsonl.gz``, partitioned by the records' Kinesis arrival time. Buffers are kept per
arrival hour, so every copy of a record lands in the same partition, and keys are deterministic from the
bounds, so a re-delivered batch with the same bounds overwrites its object instead of duplicating it.

Each line is strict JSON (format 2, ``"v":2``) and keeps the record's bytes exactly: ``data`` holds them as
text when they are a JSON text (see :func:`json_text`), ``data_base64`` otherwise. Nothing is parsed and
written back, so numbers, key order, escapes and whitespace survive; :func:`record_data` gives the bytes back
from a parsed line.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import io
import json
import logging
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from consumer.aws import shared_client
from consumer.aws_errors import PROVIDER_FAILURES, classify
from consumer.errors import ConfigError, ConsumerError, LeaseLostError, MissingResourceError
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseGuard,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
    Timers,
)
from consumer.logs import log_event
from consumer.records import Record

__all__ = ["RAW_FORMAT", "RawS3Sink", "encode_line", "json_text", "object_key", "record_data"]

logger = logging.getLogger(__name__)

#: The raw line format this sink writes (the ``v`` field; lines without it are format 1).
RAW_FORMAT = 2
# Bounds within which a JSON text is kept as text: Spark's JSON parser (Jackson) refuses deeper nesting than
# 1,000, numbers longer than 1,000 characters and keys longer than 50,000 bytes; the margins are deliberate.
_MAX_DEPTH = 500
_MAX_NUMBER = 1_000
_MAX_KEY = 10_000
_SURROGATE = re.compile("[\\ud800-\\udfff]")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_FAILURE_LOG_INTERVAL = 60.0  # the same flush failure is logged at most once a minute


class _Object(list[tuple[str, Any]]):
    """A parsed JSON object as its (key, value) pairs (no dict built); duplicate keys are refused."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        if len(pairs) > 1 and len({key for key, _ in pairs}) < len(pairs):
            raise ValueError("duplicate key")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _number(text: str) -> int:
    if len(text) > _MAX_NUMBER:
        raise ValueError("number too long")
    return 0  # only the syntax matters; the text is kept as it is


def _within_bounds(value: Any) -> bool:
    """No escaped lone surrogate, no key past ``_MAX_KEY`` characters, nesting within ``_MAX_DEPTH``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return False
        elif isinstance(item, list):
            if depth >= _MAX_DEPTH:
                return False
            if isinstance(item, _Object):
                for key, child in item:
                    if len(key) > _MAX_KEY or _SURROGATE.search(key):
                        return False
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
    return True


def json_text(data: bytes) -> str | None:
    """``data`` as text when it is a JSON text that every strict reader accepts, else ``None``.

    Strict means RFC 8259 read the interoperable way: UTF-8 without a byte-order mark, no ``NaN``/``Infinity``,
    comments, single quotes or trailing commas, no escaped lone surrogate (``"\\\\ud800"`` is no character),
    unique keys in every object (readers disagree on duplicates: first, last or error), and within the bounds
    of Spark's parser (nesting <= 500, numbers <= 1,000 characters, keys <= 10,000). Any whitespace, escapes
    and numbers of any precision or size (``1e400``) are fine: the text is kept, never re-serialized. Data
    outside this goes to ``data_base64``, as exact.
    """
    try:
        text = data.decode("utf-8")
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_int=_number,
            parse_float=_number,
            object_pairs_hook=_Object,
        )
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    needs_walk = "\\u" in text or len(text) > _MAX_KEY or text.count("[") + text.count("{") > _MAX_DEPTH
    if needs_walk and not _within_bounds(value):
        return None
    return text


def _arrival(record: Record) -> str:
    t = record.approximate_arrival.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def encode_line(record: Record, epoch: int) -> bytes:
    """One raw line (format 2, without its newline): strict JSON that keeps the record's bytes exactly."""
    head = json.dumps(
        {
            "v": RAW_FORMAT,
            "stream": record.stream,
            "shard_id": record.shard_id,
            "sequence_number": record.sequence_number,
            "sub_sequence_number": record.sub_sequence_number,
            "partition_key": record.partition_key,
            "arrival_time": _arrival(record),
            "epoch": epoch,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    text = json_text(record.data)
    if text is not None:
        data = '"data":' + json.dumps(text, ensure_ascii=False)
    else:
        data = '"data_base64":"' + base64.b64encode(record.data).decode("ascii") + '"'
    return (head[:-1] + "," + data + "}").encode("utf-8", "backslashreplace")


def record_data(line: Mapping[str, Any]) -> bytes:
    """The record's exact bytes from a parsed format-2 line (``ValueError`` for anything else)."""
    if line.get("v") != RAW_FORMAT:
        raise ValueError(f"not a format-{RAW_FORMAT} raw line (v={line.get('v')!r})")
    if isinstance(line.get("data"), str) and "data_base64" not in line:
        return str(line["data"]).encode("utf-8")
    if isinstance(line.get("data_base64"), str) and "data" not in line:
        try:
            return base64.b64decode(str(line["data_base64"]), validate=True)
        except binascii.Error as err:
            raise ValueError(f"data_base64 is not base64: {err}") from None
    raise ValueError("a format-2 line holds exactly one of data (string) and data_base64 (string)")


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
    root = prefix.strip("/")
    return f"{root + '/' if root else ''}stream={first.stream}/date={date}/hour={hour}/{name}"


def _int_setting(value: int | None, env: Mapping[str, str], name: str, default: int) -> int:
    if value is None:
        raw = env.get(name, "").strip()
        try:
            value = int(raw) if raw else default
        except ValueError:
            raise ConfigError(name, f"must be a whole number > 0, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(name, f"must be a whole number > 0, got {value!r}")
    return value


def _seconds_setting(value: float | None, env: Mapping[str, str], name: str, default: float) -> float:
    if value is None:
        raw = env.get(name, "").strip()
        try:
            value = float(raw) if raw else default
        except ValueError:
            raise ConfigError(name, f"must be a number of seconds > 0, got {raw!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a number of seconds > 0, got {value!r}")
    return value


def _bucket_setting(bucket: str | None, env: Mapping[str, str]) -> str:
    name = (bucket if bucket is not None else env.get("CONSUMER_RAW_BUCKET", "")).strip()
    if not name:
        raise ConfigError("CONSUMER_RAW_BUCKET", "the raw sink needs a bucket name")
    if name.startswith("s3://") or "/" in name:
        raise ConfigError(
            "CONSUMER_RAW_BUCKET",
            f"give the bucket name only, got {name!r} (the key prefix goes in CONSUMER_RAW_PREFIX)",
        )
    if not _BUCKET.match(name) or ".." in name:
        raise ConfigError(
            "CONSUMER_RAW_BUCKET",
            f"{name!r} is not an S3 bucket name (3-63 characters: a-z, 0-9, '.', '-')",
        )
    return name


@dataclass
class _Buffer:
    records: list[Record] = field(default_factory=list)
    size: int = 0
    born: float = field(default_factory=time.monotonic)


class RawS3Sink:
    """Record processor (one per shard). Settings: ``CONSUMER_RAW_BUCKET`` (required),
    ``CONSUMER_RAW_PREFIX`` (``raw``), ``RAW_MAX_BYTES`` (5 MiB), ``RAW_MAX_RECORDS`` (10,000),
    ``RAW_MAX_AGE_SECONDS`` (60).

    Settings are checked when the sink is constructed (a :class:`~consumer.errors.ConfigError` names the
    variable), so a worker that builds one processor at start-up fails before it takes a lease.

    It has no thread and no lock: the worker calls it one call at a time per shard, and its age flush is a
    timer on the shard's lane (``InitializationInput.timers``), serialized with those calls. Given no timers
    (an engine without them), a buffer past its age is written when the next batch comes."""

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
        self.bucket = _bucket_setting(bucket, env)
        self.prefix = prefix if prefix is not None else env.get("CONSUMER_RAW_PREFIX", "raw")
        self.max_bytes = _int_setting(max_bytes, env, "RAW_MAX_BYTES", 5 * 1024 * 1024)
        self.max_records = _int_setting(max_records, env, "RAW_MAX_RECORDS", 10_000)
        self.max_age = _seconds_setting(max_age, env, "RAW_MAX_AGE_SECONDS", 60.0)
        self._client = client or shared_client("s3")
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._timers: Timers | None = None
        self._stopped = False  # no age flush after a stop, a shard end or a lost lease
        self._guard: LeaseGuard | None = None
        self._epoch = 0
        self._shard = ""
        self._last_failure = ("", 0.0)  # (message, when logged)
        self.objects_written = 0

    # -- lifecycle ---------------------------------------------------------------------------------
    def initialize(self, data: InitializationInput) -> None:
        self._guard, self._epoch, self._shard = data.guard, data.epoch, data.shard_id
        self._timers = getattr(data, "timers", None)
        self._arm()

    def process_records(self, data: ProcessRecordsInput) -> None:
        for r in data.records:
            buf = self._buffers.setdefault(_hour(r), _Buffer())
            buf.records.append(r)
            buf.size += len(r.data) + 200
            if buf.size >= self.max_bytes or len(buf.records) >= self.max_records:
                self._write(_hour(r))
        if self._timers is None:  # no age timer: the buffers past their age go with this batch
            try:
                self._write_old()
            except LeaseLostError:
                raise
            except Exception as exc:  # this batch is buffered: kept, and tried again with the next one
                self._flush_failed(exc)

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        self._stopped = True
        self.flush()
        data.checkpointer.checkpoint()

    def shard_ended(self, data: ShardEndedInput) -> None:
        self._stopped = True
        self.flush()
        data.checkpointer.checkpoint()

    def lease_lost(self, data: LeaseLostInput) -> None:
        self._stopped = True
        dropped = sum(len(b.records) for b in self._buffers.values())
        self._buffers.clear()  # not ours to write any more; the next owner re-reads them
        log_event(logger, "raw_buffers_dropped", logging.WARNING, shard=data.shard_id, records=dropped)

    # -- writing -----------------------------------------------------------------------------------
    def flush(self) -> None:
        for hour in sorted(self._buffers):
            self._write(hour)

    def _arm(self) -> None:
        if self._timers is not None and not self._stopped:
            self._timers.call_later(min(1.0, self.max_age / 4), self._age_flush)

    def _age_flush(self) -> None:
        """The age timer (on the shard's lane, between the worker's calls): write the buffers past their
        age; a failure keeps them for the next tick, or for a batch, whose own write raises to delivery's
        policy (a bug is logged in full)."""
        if self._stopped:
            return
        try:
            self._write_old()
        except LeaseLostError:
            self._stopped = True
            return
        except Exception as exc:  # the timer goes on: the buffers are tried again next tick
            self._flush_failed(exc)
        self._arm()

    def _write_old(self) -> None:
        old = [h for h, b in self._buffers.items() if time.monotonic() - b.born >= self.max_age]
        for hour in sorted(old):
            self._write(hour)

    def _flush_failed(self, exc: Exception) -> None:
        """One short line per distinct failure (at most once a minute while it repeats), not a traceback
        per attempt: the buffers stay, and the next attempt retries them."""
        message = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        last, when = self._last_failure
        if message == last and now - when < _FAILURE_LOG_INTERVAL:
            return
        self._last_failure = (message, now)
        expected = isinstance(exc, ConsumerError | ClientError | BotoCoreError | OSError)
        logger.warning(
            "raw flush to s3://%s failed: %s",
            self.bucket,
            message[:500],
            exc_info=None if expected else exc,
            extra={"event": "raw_flush_failed", "bucket": self.bucket, "shard": self._shard},
        )

    def _write(self, hour: tuple[str, str]) -> None:
        """Upload one hour's buffer, then mark its records done."""
        buf = self._buffers.get(hour)
        if buf is None or not buf.records:
            return
        body = io.BytesIO()
        with gzip.GzipFile(fileobj=body, mode="wb", mtime=0) as gz:  # mtime 0: same bytes on re-delivery
            for r in buf.records:
                gz.write(encode_line(r, self._epoch) + b"\n")
        key = object_key(self.prefix, buf.records)
        if self._guard is not None:
            self._guard.ensure_valid()  # fenced: a zombie never writes a batch the new owner also writes
        try:
            self._client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=body.getvalue(),
                ContentType="application/x-ndjson",
                ContentEncoding="gzip",
            )
        except PROVIDER_FAILURES as exc:
            if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise MissingResourceError(
                    f"CONSUMER_RAW_BUCKET: S3 bucket {self.bucket!r} does not exist; create it or fix "
                    "CONSUMER_RAW_BUCKET"
                ) from exc
            raise classify(exc, "s3", f"put s3://{self.bucket}/{key}") from exc
        del self._buffers[hour]
        self.objects_written += 1
        log_event(logger, "raw_object_written", logging.DEBUG, key=key, records=len(buf.records))
        for r in buf.records:
            r.done()
