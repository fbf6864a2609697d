"""The demo's record processor: the raw S3 sink, journalling every delivery as the benchmark does.

Workers load it with ``CONSUMER_PROCESSOR=tools.demo_processor:JournaledRawSink``. It behaves exactly like
:class:`consumer.sinks.raw_s3.RawS3Sink` (manual checkpoints: a record is done only once its object is in
S3) and additionally appends each delivery to ``JOURNAL_PATH`` in the format of
:mod:`consumer.examples.journal`, so :mod:`bench.fleet_analysis` can tell who delivered what, when and under
which epoch.
"""

from __future__ import annotations

from consumer.examples.journal import JournalProcessor
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.sinks.raw_s3 import RawS3Sink

__all__ = ["JournaledRawSink"]


class JournaledRawSink(RawS3Sink):
    """:class:`RawS3Sink` plus a delivery journal (one per worker process, ``JOURNAL_PATH``)."""

    def __init__(self) -> None:
        super().__init__()
        self._journal = JournalProcessor()

    def initialize(self, data: InitializationInput) -> None:
        self._journal.initialize(data)
        super().initialize(data)

    def process_records(self, data: ProcessRecordsInput) -> None:
        self._journal.process_records(data)  # journals the deliveries (manual marking stays with the sink)
        super().process_records(data)

    def lease_lost(self, data: LeaseLostInput) -> None:
        super().lease_lost(data)
        self._journal.lease_lost(data)

    def shard_ended(self, data: ShardEndedInput) -> None:
        super().shard_ended(data)  # flush, then checkpoint SHARD_END
        self._journal.shard_ended(data)

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        super().shutdown_requested(data)  # flush, then the final checkpoint
        self._journal.shutdown_requested(data)  # checkpoints again (a no-op at the same position), journals
