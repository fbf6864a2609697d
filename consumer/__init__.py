"""A Kinesis Data Streams consumer for autoscaling fleets.

Fenced leases (an ownership epoch per shard), checkpoints that only the current owner can write and that
never go back, per-record manual checkpointing, processor failures that never skip a record, and
cooperative hand-offs between workers.
"""

from __future__ import annotations

from consumer.config import (
    CheckpointConfig,
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
)
from consumer.errors import (
    CheckpointRejectedError,
    ConfigError,
    ConsumerError,
    LeaseLostError,
    MissingResourceError,
    ProcessorLoadError,
)
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
)
from consumer.lifecycle.worker import Worker
from consumer.records import SHARD_END, Position, Record

__all__ = [
    "SHARD_END",
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
    "Worker",
    "WorkerConfig",
]
