"""A Kinesis Data Streams consumer for autoscaling fleets.

Fenced leases (an ownership epoch per shard), checkpoints that only the current owner can write and that
never go back, per-record manual checkpointing, processor failures that never skip a record, and
cooperative hand-offs between workers. Processors are synchronous or asyncio (``async def`` callbacks).

Embed a worker with ``consumer.create_worker(config, session=...)`` (or ``Worker.create``), then ``start()``
/ ``stop()`` / ``join()`` or ``with``; or run ``python -m consumer run``.
"""

from __future__ import annotations

from consumer._version import __version__
from consumer.aws_errors import UnreachableError
from consumer.config import (
    CheckpointConfig,
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    ThreadsConfig,
    WorkerConfig,
)
from consumer.embed import create_worker
from consumer.errors import (
    CheckpointRejectedError,
    ConfigError,
    ConsumerError,
    LeaseLostError,
    MissingResourceError,
    ProcessorLoadError,
)
from consumer.lifecycle.async_processor import AsyncBaseProcessor, AsyncRecordProcessor
from consumer.lifecycle.processor import (
    BaseProcessor,
    Checkpointer,
    InitializationInput,
    LeaseGuard,
    LeaseLostInput,
    ProcessRecordsInput,
    RecordProcessor,
    ShardEndedInput,
    ShutdownReason,
    ShutdownRequestedInput,
    Timers,
)
from consumer.lifecycle.worker import Worker
from consumer.records import SHARD_END, Position, Record

__all__ = [
    "SHARD_END",
    "AsyncBaseProcessor",
    "AsyncRecordProcessor",
    "BaseProcessor",
    "CheckpointConfig",
    "CheckpointRejectedError",
    "Checkpointer",
    "ConfigError",
    "ConsumerError",
    "InitializationInput",
    "LeaseConfig",
    "LeaseGuard",
    "LeaseLostError",
    "LeaseLostInput",
    "MissingResourceError",
    "Position",
    "ProcessRecordsInput",
    "ProcessingConfig",
    "ProcessorLoadError",
    "Record",
    "RecordProcessor",
    "RetrievalConfig",
    "ShardEndedInput",
    "ShutdownConfig",
    "ShutdownReason",
    "ShutdownRequestedInput",
    "StreamSpec",
    "ThreadsConfig",
    "Timers",
    "UnreachableError",
    "Worker",
    "WorkerConfig",
    "__version__",
    "create_worker",
]
