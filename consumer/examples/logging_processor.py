"""A processor that logs each record as a JSON line (what the record is, where it came from)."""

from __future__ import annotations

import logging

from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.logs import log_event

__all__ = ["LoggingProcessor"]

logger = logging.getLogger(__name__)


class LoggingProcessor(BaseProcessor):
    def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id
        log_event(
            logger,
            "processor_initialized",
            stream=data.stream,
            shard=data.shard_id,
            epoch=data.epoch,
            start=str(data.starting_position),
        )

    def process_records(self, data: ProcessRecordsInput) -> None:
        for r in data.records:
            try:
                payload: object = r.json()
            except ValueError:
                payload = f"<{len(r.data)} bytes>"
            log_event(
                logger,
                "record",
                stream=r.stream,
                shard=r.shard_id,
                sequence=r.sequence_number,
                sub_sequence=r.sub_sequence_number,
                epoch=data.epoch,
                payload=payload,
            )
