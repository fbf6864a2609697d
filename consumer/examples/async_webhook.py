"""An asyncio processor: each batch POSTed to an HTTP endpoint as JSON lines, with the ownership epoch.

Settings: ``WEBHOOK_URL`` (required; ``http://`` or ``https://``) and ``WEBHOOK_TIMEOUT_SECONDS`` (default
10). One request per batch, in shard order; the batch is checkpointed when the endpoint answers 2xx. Any other
answer, a timeout or a refused connection raises, so the consumer retries the batch (then dead-letters it or
halts the shard, as configured): nothing is skipped. The headers ``X-Kinesis-Epoch``, ``X-Kinesis-Stream``
and ``X-Kinesis-Shard`` let the receiver fence: a receiver that remembers the highest epoch per shard and
answers 409 to an older one keeps a former owner's late batch out; the processor then treats the lease as
lost. The HTTP client is asyncio's own streams (no dependency), so many shards' requests overlap on the
worker's one event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import math
import os
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

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("WEBHOOK_URL", f"must be an http:// or https:// URL, got {self.url!r}")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):  # inf would wait for ever, nan never
            raise ConfigError(
                "WEBHOOK_TIMEOUT_SECONDS", f"must be a finite number of seconds > 0, got {self.timeout!r}"
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
    """POST ``body`` (one request, one connection) and return the status code."""
    parts = urlsplit(target.url)
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(parts.hostname, port, ssl=tls), target.timeout
    )
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
        return int(fields[1])
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):  # the answer counts; a reset after it does not
            await writer.wait_closed()


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
        data.guard.ensure_valid()  # no request from an owner that can no longer prove it owns the shard
        body = b"".join(_line(r, data.epoch) for r in data.records)
        headers = {
            "X-Kinesis-Epoch": str(data.epoch),
            "X-Kinesis-Stream": data.records[0].stream,
            "X-Kinesis-Shard": data.records[0].shard_id,
        }
        try:
            status = await post(self.target, body, headers)
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise WebhookError(f"{self.target.url}: {type(exc).__name__}: {exc}") from exc
        if status == 409:
            raise LeaseLostError(
                f"{self.target.url} refused epoch {data.epoch} of {self.shard}: a newer owner wrote"
            )
        if not 200 <= status < 300:
            raise WebhookError(f"{self.target.url} answered {status} to {len(data.records)} records")
