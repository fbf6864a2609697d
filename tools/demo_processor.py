"""The demo's processor (``CONSUMER_PROCESSOR=tools.demo_processor:journaled``): the environment's own
(``DEMO_PROCESSOR``, built on the raw S3 sink) unchanged, with a delivery journal in front."""

from __future__ import annotations

import functools
import logging
import os
import pkgutil

from consumer.errors import LeaseLostError
from consumer.examples.journal import JournalProcessor
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.logs import log_event
from consumer.sinks.raw_s3 import RawS3Sink

__all__ = ["JournaledRawSink", "journaled"]

logger = logging.getLogger(__name__)


class JournaledRawSink(RawS3Sink):
    """:class:`RawS3Sink` plus a delivery journal (``JOURNAL_PATH``), mixed in front of a processor."""

    def __init__(self) -> None:
        super().__init__()
        self._journal = JournalProcessor()

    def initialize(self, data: InitializationInput) -> None:
        self._journal.initialize(data)
        super().initialize(data)

    def process_records(self, data: ProcessRecordsInput) -> None:
        self._journal.process_records(data)
        try:
            super().process_records(data)
        except LeaseLostError as exc:  # e.g. StaleEpochError: logged here, as the worker may not log it
            log_event(
                logger,
                "demo_processor_lease_lost",
                logging.WARNING,
                shard=data.records[0].shard_id if data.records else "",
                epoch=data.epoch,
                error_type=type(exc).__name__,
                error=str(exc),
            )
            raise

    def lease_lost(self, data: LeaseLostInput) -> None:
        super().lease_lost(data)
        self._journal.lease_lost(data)

    def shard_ended(self, data: ShardEndedInput) -> None:
        super().shard_ended(data)  # flush, then checkpoint SHARD_END
        self._journal.shard_ended(data)

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        super().shutdown_requested(data)  # flush, then the final checkpoint
        self._journal.shutdown_requested(data)  # checkpoints again (a no-op at the same position), journals


@functools.cache
def _journaled_class(entry_point: str) -> type[RawS3Sink]:
    target = pkgutil.resolve_name(entry_point)
    if not (isinstance(target, type) and issubclass(target, RawS3Sink)):
        raise TypeError(f"{entry_point} is not built on consumer.sinks.raw_s3:RawS3Sink; the demo needs S3")
    return type(f"Journaled{target.__name__}", (JournaledRawSink, target), {})


def journaled() -> RawS3Sink:
    """One processor (per shard) of ``DEMO_PROCESSOR`` (default: the raw sink alone), journalling."""
    return _journaled_class(os.environ.get("DEMO_PROCESSOR", "consumer.sinks.raw_s3:RawS3Sink"))()
