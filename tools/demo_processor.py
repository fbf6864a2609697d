"""The demo's record processor: the environment's own processor, journalling every delivery as the benchmark does.

Workers load it with ``CONSUMER_PROCESSOR=tools.demo_processor:journaled`` and ``DEMO_PROCESSOR`` set to the
entry point the environment deploys (``cdk.json``: ``consumer.processor``; dev's is the example project's
``latest_per_key.processor:LatestPerKey``). :func:`journaled` builds that processor with a delivery journal
mixed in (:class:`JournaledRawSink` placed before it in the method order), so every callback runs the
processor's own code unchanged (its side effects, its manual checkpoints: a record is done only once its
object is in S3) and additionally appends each delivery to ``JOURNAL_PATH`` in the format of
:mod:`consumer.examples.journal`, so :mod:`tools.fleet.analysis` can tell who delivered what, when and under
which epoch; a ``LeaseLostError`` out of the processor's ``process_records`` (the example's ``StaleEpochError``:
its table refused a write from an older epoch) is logged as ``demo_processor_lease_lost`` with its type, every
time, before it reaches the worker. The processor must be the raw S3 sink or build on it: the demo compacts what lands in S3.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading

from consumer.errors import LeaseLostError
from consumer.examples.journal import JournalProcessor
from consumer.lifecycle.processor import (
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.loader import load_processor
from consumer.logs import log_event
from consumer.sinks.raw_s3 import RawS3Sink

__all__ = ["JournaledRawSink", "journaled", "journaled_class"]

logger = logging.getLogger(__name__)


class JournaledRawSink(RawS3Sink):
    """:class:`RawS3Sink` plus a delivery journal (one per worker process, ``JOURNAL_PATH``); also the mixin
    that :func:`journaled_class` puts in front of a processor built on the raw sink."""

    def __init__(self) -> None:
        super().__init__()
        self._journal = JournalProcessor()

    def initialize(self, data: InitializationInput) -> None:
        self._journal.initialize(data)
        super().initialize(data)

    def process_records(self, data: ProcessRecordsInput) -> None:
        self._journal.process_records(data)  # journals the deliveries (manual marking stays with the sink)
        try:
            super().process_records(data)
        except LeaseLostError as exc:  # e.g. the example's StaleEpochError: its table refused an older epoch
            # Logged here because the worker may not log it: a batch it retries is delivered again.
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


_classes: dict[str, type[RawS3Sink]] = {}
_classes_lock = threading.Lock()


def journaled_class(entry_point: str) -> type[RawS3Sink]:
    """The processor class at ``entry_point`` (``module:Class``, built on :class:`RawS3Sink`) with the journal
    in front: ``Journaled<Class>(JournaledRawSink, Class)``, whose every callback journals and then runs the
    processor's own."""
    with _classes_lock:
        if entry_point in _classes:
            return _classes[entry_point]
        module, _, name = entry_point.partition(":")
        load_processor(entry_point)  # the loader's own one-line errors for a bad path
        target: object = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        if not (isinstance(target, type) and issubclass(target, RawS3Sink)):
            raise TypeError(
                f"{entry_point} is not built on consumer.sinks.raw_s3:RawS3Sink; the demo needs S3"
            )
        cls = (
            JournaledRawSink
            if target is RawS3Sink
            else type(f"Journaled{target.__name__}", (JournaledRawSink, target), {})
        )
        _classes[entry_point] = cls
        return cls


def journaled() -> RawS3Sink:
    """One processor (per shard) of ``DEMO_PROCESSOR`` (default: the raw sink alone), journalling."""
    return journaled_class(os.environ.get("DEMO_PROCESSOR", "consumer.sinks.raw_s3:RawS3Sink"))()
