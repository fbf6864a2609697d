"""``latest_per_key.processor:LatestPerKey``: the raw S3 sink, plus the newest record of every partition key.

Settings (environment): ``LATEST_TABLE`` (the table; cdk.json's ``consumer.processor_table`` creates it and
sets the variable) and the raw sink's ``CONSUMER_RAW_BUCKET`` / ``CONSUMER_RAW_PREFIX``. The table is written
before the batch reaches the raw sink, so a record is checkpointed (by the sink, once in S3) only after its
upsert; a redelivered record's upsert is refused as a no-op.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from consumer.aws import shared_client
from consumer.errors import ConfigError
from consumer.lifecycle.processor import InitializationInput, ProcessRecordsInput
from consumer.logs import log_event
from consumer.records import Record
from consumer.sinks.raw_s3 import RawS3Sink
from latest_per_key.table import FencedLatestTable, position

__all__ = ["LatestPerKey", "newest_per_key"]

logger = logging.getLogger(__name__)


def newest_per_key(records: Sequence[Record]) -> list[Record]:
    """The last record of each partition key in the batch (a batch is one shard's records, in order)."""
    newest: dict[str, Record] = {}
    for record in records:
        if record.partition_key not in newest or position(record) > position(newest[record.partition_key]):
            newest[record.partition_key] = record
    return list(newest.values())


class LatestPerKey(RawS3Sink):
    """Record processor (one per shard): upserts each key's newest record, fenced by epoch, then archives."""

    def __init__(self, client: Any = None, table: str | None = None, **raw_sink: Any) -> None:
        super().__init__(**raw_sink)
        name = (table if table is not None else os.environ.get("LATEST_TABLE", "")).strip()
        if not name:
            raise ConfigError("LATEST_TABLE", "is required: the DynamoDB table of each key's newest record")
        self.table = FencedLatestTable(client or shared_client("dynamodb"), name)
        self._shard_id = ""
        self.upserts = self.refused = 0

    def initialize(self, data: InitializationInput) -> None:
        self._shard_id = data.shard_id
        super().initialize(data)

    def process_records(self, data: ProcessRecordsInput) -> None:
        for record in newest_per_key(data.records):
            data.guard.ensure_valid()  # stop early; the condition on the epoch is what fences for sure
            write = self.table.upsert(self._shard_id, data.epoch, record)  # StaleEpochError: lease lost
            self.upserts += write.accepted
            self.refused += not write.accepted
        if self.refused:
            log_event(logger, "latest_refused", shard=self._shard_id, refused=self.refused, epoch=data.epoch)
            self.refused = 0
        super().process_records(data)
