"""Copies one stream into another, fenced by the ownership epoch.

Before every PutRecords the copier proves it still owns the source shard (``guard.ensure_valid``): a paused
or superseded worker stops writing instead of interleaving with the new owner, which is what corrupts a
KCL-based copier during scaling. Every output record carries its source coordinates and the epoch, so a
downstream reader can drop the at-least-once duplicates a crash leaves behind.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from consumer.aws import shared_client
from consumer.errors import ConfigError
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.resources import Resource

__all__ = ["StreamCopier"]


class StreamCopier(BaseProcessor):
    """Copies its shard's records into ``COPIER_TARGET_STREAM`` (or ``target_stream``), fenced by the epoch."""

    def __init__(self, client: Any = None, target_stream: str | None = None) -> None:
        self._client = client or shared_client("kinesis")
        target = target_stream or os.environ.get("COPIER_TARGET_STREAM")
        if not target or not target.strip():
            raise ConfigError("COPIER_TARGET_STREAM", "is required: the stream to copy into")
        if len(target) > 128:
            raise ConfigError("COPIER_TARGET_STREAM", f"a stream name has 1..128 characters, got {target!r}")
        self._target = target.strip()

    @property
    def target_stream(self) -> str:
        """The stream copied into."""
        return self._target

    def required_resources(self) -> list[Resource]:
        """Checked when the worker starts: the stream copied into must exist."""
        return [Resource("kinesis_stream", self._target, "COPIER_TARGET_STREAM")]

    def check_source_stream(self, stream: str) -> None:
        """Refuse to copy ``stream`` into itself (the copies would be copied again, without end); called
        when the worker makes the processor for a stream, so the start-up checks stop a worker set so."""
        if stream == self._target:
            raise ConfigError(
                "COPIER_TARGET_STREAM",
                f"must differ from the stream being copied ({stream!r}): a stream copied into itself "
                "grows without end",
            )

    def initialize(self, data: InitializationInput) -> None:
        self.check_source_stream(data.stream)  # a processor made outside the worker's checks, too
        self._source = f"{data.stream}/{data.shard_id}"

    def process_records(self, data: ProcessRecordsInput) -> None:
        entries = []
        for r in data.records:
            header = {
                "src": self._source,
                "seq": r.sequence_number,
                "sub": r.sub_sequence_number,
                "epoch": data.epoch,
            }
            body = json.dumps(header).encode() + b"\n" + r.data
            entries.append({"Data": body, "PartitionKey": r.partition_key})
        for start in range(0, len(entries), 500):
            pending = entries[start : start + 500]
            while pending:
                data.guard.ensure_valid()  # the fence: never write for a shard we may no longer own
                out = self._client.put_records(StreamName=self._target, Records=pending)
                pending = [e for e, res in zip(pending, out["Records"], strict=True) if "ErrorCode" in res]
                if pending:
                    time.sleep(0.2)  # throttled entries: back off, then retry only those
