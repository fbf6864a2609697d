"""An asyncio processor: each batch POSTed to an HTTP endpoint as JSON lines, with the ownership epoch.

Settings: ``WEBHOOK_URL`` (required; ``http://`` or ``https://``) and ``WEBHOOK_TIMEOUT_SECONDS`` (default
10: each of connect, send, answer and close). One request per batch, in shard order; the batch is
checkpointed when the endpoint answers 2xx.

An endpoint that is unavailable (a 5xx, 408 or 429 answer, a timeout, a refused or dropped connection) is
not the batch's fault: the processor sends the same batch again itself, with a jittered backoff from
``retry_base`` doubling up to ``retry_max`` seconds, for up to ``retry_for`` seconds (default 300) and only
while the lease is still provably ours; one ``webhook_unavailable`` warning opens an outage and one
``webhook_recovered`` line closes it. So an outage shorter than ``retry_for`` dead-letters nothing, halts no
shard and does not turn into one request per record. Past ``retry_for``, and at once for any other answer
(a 4xx: the receiver refuses the content), it raises ``WebhookError``: the consumer's policy retries the
batch, then each record alone, then dead-letters it or halts the shard, as configured; nothing is skipped.

The headers ``X-Kinesis-Epoch``, ``X-Kinesis-Stream`` and ``X-Kinesis-Shard`` let the receiver fence: a
receiver that remembers the highest epoch per shard and answers 409 to an older one keeps a former owner's
late batch out; the processor then treats the lease as lost. The HTTP client is asyncio's own streams (no
dependency), so many shards' requests overlap on the worker's one event loop.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import os
import random
from dataclasses import dataclass
from urllib.parse import urlsplit

from consumer.errors import ConfigError, LeaseLostError
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput
from consumer.logs import log_event
from consumer.records import Record

__all__ = ["AsyncWebhook", "WebhookError", "WebhookTarget"]

logger = logging.getLogger(__name__)


class WebhookError(Exception):
    """The endpoint did not accept a batch (the consumer retries it)."""


@dataclass(frozen=True)
class WebhookTarget:
    """Where batches go, parsed and checked once: scheme, host, port and path of ``WEBHOOK_URL``."""

    url: str
    timeout: float = 10.0
    retry_for: float = 300.0  # how long an unavailable endpoint is retried before the consumer's policy
    retry_base: float = 0.5  # the first backoff; it doubles up to retry_max
    retry_max: float = 30.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("WEBHOOK_URL", f"must be an http:// or https:// URL, got {self.url!r}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):  # inf would wait for ever, nan never
            raise ConfigError(
                "WEBHOOK_TIMEOUT_SECONDS", f"must be a finite number of seconds > 0, got {self.timeout!r}"
            )
        if not (self.retry_for >= 0 and math.isfinite(self.retry_for)):
            raise ConfigError(
                "WebhookTarget.retry_for", f"must be finite seconds >= 0, got {self.retry_for!r}"
            )
        if not (0 < self.retry_base <= self.retry_max and math.isfinite(self.retry_max)):
            raise ConfigError(
                "WebhookTarget.retry_base",
                f"must be > 0 and <= retry_max (finite), got {self.retry_base!r} and {self.retry_max!r}",
            )

    @classmethod
    def from_env(cls) -> WebhookTarget:
        """``WEBHOOK_URL`` and ``WEBHOOK_TIMEOUT_SECONDS`` from the environment."""
        url = os.environ.get("WEBHOOK_URL", "").strip()
        if not url:
            raise ConfigError("WEBHOOK_URL", "is required: the endpoint that receives each batch")
        raw = os.environ.get("WEBHOOK_TIMEOUT_SECONDS", "").strip() or "10"
        try:
            timeout = float(raw)
        except ValueError:
            raise ConfigError(
                "WEBHOOK_TIMEOUT_SECONDS", f"must be a number of seconds, got {raw!r}"
            ) from None
        return cls(url, timeout)


def _line(record: Record, epoch: int) -> bytes:
    doc: dict[str, object] = {
        "stream": record.stream,
        "shard": record.shard_id,
        "sequence": record.sequence_number,
        "sub_sequence": record.sub_sequence_number,
        "partition_key": record.partition_key,
        "epoch": epoch,
        "data_base64": base64.b64encode(record.data).decode("ascii"),
    }
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


async def post(target: WebhookTarget, body: bytes, headers: dict[str, str]) -> int:
    """POST ``body`` (one request, one connection) and return the status code. Every step, the closing of
    the connection included, waits at most ``target.timeout``: a receiver that stops reading cannot hold
    the shard."""
    parts = urlsplit(target.url)
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(parts.hostname, port, ssl=tls), target.timeout
    )
    answered = False
    try:
        head = [
            f"POST {path} HTTP/1.1",
            f"Host: {parts.netloc}",
            "Content-Type: application/x-ndjson",
            f"Content-Length: {len(body)}",
            "Connection: close",
            *(f"{k}: {v}" for k, v in headers.items()),
        ]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await asyncio.wait_for(writer.drain(), target.timeout)
        status_line = await asyncio.wait_for(reader.readline(), target.timeout)
        fields = status_line.decode("latin-1").split()
        if len(fields) < 2 or not fields[1].isdigit():
            raise WebhookError(f"{target.url}: not an HTTP answer: {status_line[:80]!r}")
        answered = True
        return int(fields[1])
    finally:
        await _close(writer, target.timeout, graceful=answered)


async def _close(writer: asyncio.StreamWriter, timeout: float, *, graceful: bool) -> None:
    """Close the connection. After a failure (or when a graceful close does not end within ``timeout``) it
    is aborted: a plain ``close()`` first sends what is still buffered, and a receiver that stopped reading
    would keep ``wait_closed()`` waiting for ever."""
    if not graceful:
        writer.transport.abort()
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), timeout)
    except TimeoutError:
        writer.transport.abort()
    except (ConnectionError, OSError):  # the answer counts; a reset after it does not
        pass


class _Unavailable(Exception):
    """The endpoint could not take the batch now (5xx, 408, 429, timeout, connection): worth sending again."""


_UNAVAILABLE_STATUS = frozenset({408, 429})


class AsyncWebhook(AsyncBaseProcessor):
    """Processor (one per shard): POSTs each batch to ``WEBHOOK_URL`` and checkpoints it when accepted."""

    def __init__(self, target: WebhookTarget | None = None) -> None:
        self.target = target or WebhookTarget.from_env()
        self.shard = ""

    async def initialize(self, data: InitializationInput) -> None:
        self.stream, self.shard = data.stream, data.shard_id
        log_event(logger, "webhook_shard_started", stream=data.stream, shard=data.shard_id, epoch=data.epoch)

    async def process_records(self, data: ProcessRecordsInput) -> None:
        if not data.records:
            return
        body = b"".join(_line(r, data.epoch) for r in data.records)
        headers = {
            "X-Kinesis-Epoch": str(data.epoch),
            "X-Kinesis-Stream": data.records[0].stream,
            "X-Kinesis-Shard": data.records[0].shard_id,
        }
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.target.retry_for
        delay = self.target.retry_base
        failures = 0
        while True:
            data.guard.ensure_valid()  # no request from an owner that can no longer prove it owns the shard
            try:
                await self._send(body, headers, data)
            except _Unavailable as exc:
                failures += 1
                if failures == 1:
                    log_event(
                        logger,
                        "webhook_unavailable",
                        logging.WARNING,
                        shard=self.shard,
                        url=self.target.url,
                        error=str(exc),
                        retry_for_s=self.target.retry_for,
                    )
                wait = delay / 2 + random.uniform(0, delay / 2)
                if loop.time() + wait > give_up:
                    raise WebhookError(f"{exc} (still after {failures} attempts)") from exc
                await asyncio.sleep(wait)
                delay = min(self.target.retry_max, delay * 2)
                continue
            if failures:
                log_event(
                    logger, "webhook_recovered", shard=self.shard, url=self.target.url, attempts=failures + 1
                )
            return

    async def _send(self, body: bytes, headers: dict[str, str], data: ProcessRecordsInput) -> None:
        try:
            status = await post(self.target, body, headers)
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise _Unavailable(f"{self.target.url}: {type(exc).__name__}: {exc}") from exc
        except WebhookError as exc:  # not an HTTP answer (e.g. the connection closed before one)
            raise _Unavailable(str(exc)) from exc
        if status == 409:
            raise LeaseLostError(
                f"{self.target.url} refused epoch {data.epoch} of {self.shard}: a newer owner wrote"
            )
        if status >= 500 or status in _UNAVAILABLE_STATUS:
            raise _Unavailable(f"{self.target.url} answered {status} to {len(data.records)} records")
        if not 200 <= status < 300:
            raise WebhookError(f"{self.target.url} answered {status} to {len(data.records)} records")
