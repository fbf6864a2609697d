"""The raw S3 sink: lands every record as gzip JSON lines, checkpointing only what is durably written.

Buffers are kept per arrival hour, so every copy of a record lands in the same partition; the line format
and the object keys (deterministic from a batch's bounds, so a re-delivered batch overwrites its object
instead of duplicating it) are in :mod:`consumer.sinks.raw_format`, re-exported here. The settings are a
:class:`~consumer.config.RawSinkConfig` (docs/operations.md lists the variables).

A failed write is decided once, by ``consumer.lifecycle.retry.verdict`` over the error that
``consumer.aws_errors.classify`` made of it, with the two refusals an operator fixes while the worker runs (a
bucket that does not exist, access denied) also tried again: the records stay buffered, not done, and the
next try waits out a backoff. Anything else is a bug of ours (or a request S3 refuses as made): its traceback
is logged once (``raw_sink_failed``), the sink writes no more, and its next batch raises
:class:`RawSinkFailedError`, so that the worker halts the shard (``shard_halted``, ``HaltedShards``) before
the records that were not written. Each failed PUT counts 1 in ``RawWriteFailures`` (per stream and shard).
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from consumer.aws_errors import PROVIDER_FAILURES, classify
from consumer.errors import LeaseLostError, MissingResourceError
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
from consumer.metrics.sink import MetricsSink
from consumer.records import Record
from consumer.resources import Resource
from consumer.settings.raw_sink import RawSinkConfig, raw_sink_config_from_env, with_overrides
from consumer.sinks.raw_format import RAW_FORMAT, encode_line, json_text, object_key, record_data
from consumer.sinks.raw_format import hour_of as _hour
from consumer.sinks.raw_writes import WRITE_FAILURES, RawSinkFailedError, own_client, retried

__all__ = [
    "RAW_FORMAT",
    "WRITE_FAILURES",
    "RawS3Sink",
    "RawSinkConfig",
    "RawSinkFailedError",
    "encode_line",
    "json_text",
    "object_key",
    "record_data",
    "retried",
]

logger = logging.getLogger(__name__)

_FAILURE_LOG_INTERVAL = 60.0  # the same flush failure is logged at most once a minute
_RETRY_MIN = 1.0  # after a failed write, the next try waits this long, doubled on each failure ...
_RETRY_MAX = 30.0  # ... up to this


@dataclass
class _Buffer:
    """One arrival hour's records and their encoded lines (each with its newline), in the same order; ``size``
    is the lines' total length: exactly the uncompressed bytes of the object(s) they are written as, what
    ``max_bytes`` counts."""

    records: list[Record] = field(default_factory=list)
    lines: list[bytes] = field(default_factory=list)
    size: int = 0
    born: float = field(default_factory=time.monotonic)


class RawS3Sink:
    """Record processor (one per shard), set by a :class:`~consumer.config.RawSinkConfig`.

    The worker hands the settings in (``settings=``) when it loads the sink by path, having read them from
    ``CONSUMER_RAW_*`` with the rest of the configuration; a sink constructed without them (the Python API,
    a subclass made by a factory of its own) has the typed config read them from the process environment.
    Keyword values (``bucket=``, ``max_records=``, ...) override either. A
    :class:`~consumer.errors.ConfigError` names the setting, so a worker that builds one processor at start-up
    fails before it takes a lease. ``client``: an S3 client of your own (its timeouts and retries are yours);
    by default one of the process's, with the settings' timeouts. ``metrics``: where ``RawWriteFailures`` is
    counted; by default the worker's (``InitializationInput.metrics``).

    It has no thread and no lock: the worker calls it one call at a time per shard, and its age flush is a
    timer on the shard's lane (``InitializationInput.timers``), serialized with those calls. Given no timers
    (an engine without them), a buffer past its age is written when the next batch comes."""

    checkpoint_mode = "manual"  # records are done only once their object is written
    settings_type = RawSinkConfig  # the loader hands one in, read from the worker's environment

    def __init__(
        self,
        client: Any = None,
        bucket: str | None = None,
        prefix: str | None = None,
        max_bytes: int | None = None,
        max_records: int | None = None,
        max_age: float | None = None,
        *,
        settings: RawSinkConfig | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        given = {
            "bucket": bucket,
            "prefix": prefix,
            "max_bytes": max_bytes,
            "max_records": max_records,
            "max_age": max_age,
        }
        if settings is None:
            settings = raw_sink_config_from_env(os.environ, **given)
        self.settings = with_overrides(settings, **given)
        self.bucket = self.settings.bucket
        self.prefix = self.settings.prefix
        self.max_bytes = self.settings.max_bytes
        self.max_records = self.settings.max_records
        self.max_age = self.settings.max_age
        self._client = client or own_client(self.settings)
        self._metrics = metrics
        self._buffers: dict[tuple[str, str], _Buffer] = {}
        self._timers: Timers | None = None
        self._stopped = False  # no age flush after a stop, a shard end or a lost lease
        self._guard: LeaseGuard | None = None
        self._epoch = 0
        self._stream = ""
        self._shard = ""
        self._broken: str | None = None  # what stopped the sink (a failure not retried): it writes no more
        self._failures = 0  # failed writes in a row (logged when one works again)
        self._failed_key = ""  # the object the last failed PUT was writing
        self._last_failure = ("", 0.0)  # (message, when logged)
        self._retry_at = 0.0  # no write before this (monotonic): the backoff after a failed one
        self._retry_delay = 0.0
        self.objects_written = 0

    def required_resources(self) -> list[Resource]:
        """The bucket, checked by the worker's start-up checks before it takes a lease."""
        return [Resource("s3_bucket", self.bucket, "CONSUMER_RAW_BUCKET")]

    # -- lifecycle ---------------------------------------------------------------------------------
    def initialize(self, data: InitializationInput) -> None:
        self._guard, self._epoch, self._shard = data.guard, data.epoch, data.shard_id
        self._stream = getattr(data, "stream", "")
        self._timers = getattr(data, "timers", None)
        if self._metrics is None:
            self._metrics = getattr(data, "metrics", None)
        self._arm()

    def process_records(self, data: ProcessRecordsInput) -> None:
        """Buffer the batch and write the buffers that are full (or, with no age timer, old).

        A failed write that may pass never raises (only a lost lease does): the records are buffered, so a
        batch retried by the worker would be buffered twice, and a failure it sees as the processor's would
        halt the shard after a few quick attempts. They stay in their buffer, unacknowledged, and are tried
        again with backoff (:meth:`_age_flush`, or the next batch); fetching pauses at ``max_pending_records``.
        Once a failure that is not retried stopped the sink, every call raises :class:`RawSinkFailedError`
        (before buffering: the worker's retries of the batch add nothing), and the worker halts the shard."""
        self._check_broken()
        for r in data.records:
            self._add(r)
        self._write_due(aged=self._timers is None)
        self._check_broken()

    def _add(self, record: Record) -> None:
        """Buffer ``record`` in its arrival hour, with its line: encoded once, its length is what
        ``max_bytes`` counts."""
        line = encode_line(record, self._epoch) + b"\n"
        buf = self._buffers.setdefault(_hour(record), _Buffer())
        buf.records.append(record)
        buf.lines.append(line)
        buf.size += len(line)

    def _check_broken(self) -> None:
        if self._broken is not None:
            raise RawSinkFailedError(
                f"the raw sink stopped writing to s3://{self.bucket} after {self._broken} (raw_sink_failed has "
                "its traceback); its records are not done: fix it and roll the service"
            )

    def _write_due(self, *, aged: bool) -> None:
        """Write the buffers that are full (and past their age when ``aged``), unless a failure's backoff
        runs; a failure that may pass is logged (rate-limited) and sets the next backoff, any other stops the
        sink (:meth:`_stop_writing`)."""
        if self._broken is not None or time.monotonic() < self._retry_at:
            return
        now = time.monotonic()
        due = [
            h
            for h, b in self._buffers.items()
            if b.size >= self.max_bytes
            or len(b.records) >= self.max_records
            or (aged and now - b.born >= self.max_age)
        ]
        try:
            for hour in sorted(due):
                self._write(hour)
        except LeaseLostError:
            raise
        except Exception as exc:  # the one verdict decides: tried again after the backoff, or the sink stops
            if not retried(exc):
                self._stop_writing(exc)
                return
            self._failures += 1
            self._retry_delay = min(_RETRY_MAX, max(_RETRY_MIN, self._retry_delay * 2))
            self._retry_at = time.monotonic() + self._retry_delay
            self._flush_failed(exc)
        else:
            if due:
                self._retry_delay = 0.0
                if self._failures:
                    log_event(
                        logger,
                        "raw_flush_recovered",
                        bucket=self.bucket,
                        stream=self._stream,
                        shard=self._shard,
                        failures=self._failures,
                    )
                    self._failures, self._last_failure = 0, ("", 0.0)

    def _stop_writing(self, exc: Exception) -> None:
        """A failure that retrying cannot fix: its traceback once, and no more writes (no timer, no flush at
        a stop); the next batch halts the shard (:meth:`_check_broken`)."""
        self._broken = f"{type(exc).__name__}: {exc}"[:500]
        logger.error(
            "raw sink stopped writing to s3://%s: %s",
            self.bucket,
            self._broken,
            exc_info=exc,
            extra={
                "event": "raw_sink_failed",
                "bucket": self.bucket,
                "stream": self._stream,
                "shard": self._shard,
                "buffered": sum(len(b.records) for b in self._buffers.values()),
            },
        )

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        self._stopped = True
        if self._broken is None:  # a stopped sink writes nothing more: its records go to the next owner
            self.flush()
        data.checkpointer.checkpoint()

    def shard_ended(self, data: ShardEndedInput) -> None:
        self._stopped = True
        self._check_broken()  # never the shard's end checkpointed over records that were not written
        self.flush()
        data.checkpointer.checkpoint()

    def lease_lost(self, data: LeaseLostInput) -> None:
        self._stopped = True
        dropped = sum(len(b.records) for b in self._buffers.values())
        self._buffers.clear()  # not ours to write any more; the next owner re-reads them
        log_event(logger, "raw_buffers_dropped", logging.WARNING, shard=data.shard_id, records=dropped)

    # -- writing -----------------------------------------------------------------------------------
    def flush(self) -> None:
        """Write every buffer now (shutdown, hand-off, shard end), whatever a backoff says; raises if one fails."""
        for hour in sorted(self._buffers):
            self._write(hour)

    def _arm(self) -> None:
        if self._timers is not None and not self._stopped:
            self._timers.call_later(min(1.0, self.max_age / 4), self._age_flush)

    def _age_flush(self) -> None:
        """The age timer (on the shard's lane, between the worker's calls): write the buffers that are full or
        past their age; a failure keeps them for the next tick after its backoff, and one that is not retried
        stops the timer with the sink."""
        if self._stopped or self._broken is not None:
            return
        try:
            self._write_due(aged=True)
        except LeaseLostError:
            self._stopped = True
            return
        if self._broken is None:
            self._arm()

    def _flush_failed(self, exc: Exception) -> None:
        """One short line per distinct failure that may pass (at most once a minute while it repeats), never a
        traceback: the buffers stay, and the next attempt retries them."""
        message = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        last, when = self._last_failure
        if message == last and now - when < _FAILURE_LOG_INTERVAL:
            return
        self._last_failure = (message, now)
        logger.warning(
            "raw flush to s3://%s failed: %s",
            self.bucket,
            message[:500],
            extra={
                "event": "raw_flush_failed",
                "bucket": self.bucket,
                "stream": self._stream,
                "shard": self._shard,
                "failures": self._failures,
                "retry_in_s": round(self._retry_delay, 3),
                "key": self._failed_key,
            },
        )

    def _write(self, hour: tuple[str, str]) -> None:
        """Upload one hour's buffer, in objects of at most ``max_records`` records and ``max_bytes``
        uncompressed (one record at least, however large), marking each object's records done once it is
        written."""
        buf = self._buffers.get(hour)
        while buf is not None and buf.records:
            count, size = 0, 0
            for line in buf.lines:
                if count and (count >= self.max_records or size + len(line) > self.max_bytes):
                    break
                count, size = count + 1, size + len(line)
            written = buf.records[:count]
            self._put(written, buf.lines[:count])
            del buf.records[:count]
            del buf.lines[:count]
            buf.size -= size
            if not buf.records:
                del self._buffers[hour]
            for r in written:
                r.done()

    def _put(self, records: list[Record], lines: list[bytes]) -> None:
        """Write ``records`` (one shard, one hour, in order) as one object of their ``lines``."""
        body = io.BytesIO()
        with gzip.GzipFile(fileobj=body, mode="wb", mtime=0) as gz:  # mtime 0: same bytes on re-delivery
            gz.writelines(lines)
        key = object_key(self.prefix, records)
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
        except Exception as exc:
            self._failed_key = key
            if self._metrics is not None:  # every failed PUT, whatever it failed with
                self._metrics.add(WRITE_FAILURES, 1, self._stream or records[0].stream, self._shard or None)
            if not isinstance(exc, PROVIDER_FAILURES):
                raise  # a bug of ours (never retried)
            if isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") == "NoSuchBucket":
                raise MissingResourceError(
                    f"CONSUMER_RAW_BUCKET: S3 bucket {self.bucket!r} does not exist; create it or fix "
                    "CONSUMER_RAW_BUCKET"
                ) from exc
            raise classify(exc, "s3", "PutObject") from exc  # the key is the log line's ``key``
        self.objects_written += 1
        log_event(logger, "raw_object_written", logging.DEBUG, key=key, records=len(records))
