"""A Kinesis Data Streams consumer for autoscaling fleets.

Fenced leases (an ownership epoch per shard), checkpoints that only the current owner can write and that
never go back, per-record manual checkpointing, processor failures that never skip a record, and
cooperative hand-offs between workers. Processors are synchronous or asyncio (``async def`` callbacks).

Embed a worker with ``consumer.create_worker(config, session=...)`` (or ``Worker.create``), then ``start()``
/ ``stop()`` / ``join()`` or ``with``; or run ``python -m consumer run``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from consumer._version import __version__

if TYPE_CHECKING:
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
        WorkerStateError,
    )
    from consumer.lifecycle.async_processor import AsyncBaseProcessor, AsyncRecordProcessor
    from consumer.lifecycle.processor import (
        BaseProcessor,
        CallbackAbortedError,
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

# Where each public name lives. They are imported on first use, so that ``python -m consumer`` and a program
# that needs one name do not pay for the whole library (boto3, the worker, the processors) up front.
_EXPORTS: dict[str, str] = {
    "AsyncBaseProcessor": "consumer.lifecycle.async_processor",
    "AsyncRecordProcessor": "consumer.lifecycle.async_processor",
    "BaseProcessor": "consumer.lifecycle.processor",
    "CallbackAbortedError": "consumer.lifecycle.processor",
    "CheckpointConfig": "consumer.config",
    "CheckpointRejectedError": "consumer.errors",
    "Checkpointer": "consumer.lifecycle.processor",
    "ConfigError": "consumer.errors",
    "ConsumerError": "consumer.errors",
    "InitializationInput": "consumer.lifecycle.processor",
    "LeaseConfig": "consumer.config",
    "LeaseGuard": "consumer.lifecycle.processor",
    "LeaseLostError": "consumer.errors",
    "LeaseLostInput": "consumer.lifecycle.processor",
    "MissingResourceError": "consumer.errors",
    "Position": "consumer.records",
    "ProcessRecordsInput": "consumer.lifecycle.processor",
    "ProcessingConfig": "consumer.config",
    "ProcessorLoadError": "consumer.errors",
    "Record": "consumer.records",
    "RecordProcessor": "consumer.lifecycle.processor",
    "RetrievalConfig": "consumer.config",
    "SHARD_END": "consumer.records",
    "ShardEndedInput": "consumer.lifecycle.processor",
    "ShutdownConfig": "consumer.config",
    "ShutdownReason": "consumer.lifecycle.processor",
    "ShutdownRequestedInput": "consumer.lifecycle.processor",
    "StreamSpec": "consumer.config",
    "ThreadsConfig": "consumer.config",
    "Timers": "consumer.lifecycle.processor",
    "UnreachableError": "consumer.aws_errors",
    "Worker": "consumer.lifecycle.worker",
    "WorkerConfig": "consumer.config",
    "WorkerStateError": "consumer.errors",
    "create_worker": "consumer.embed",
}

if not TYPE_CHECKING:  # for mypy the names above are plain re-exports; a module __getattr__ would hide typos

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'consumer' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_EXPORTS})


__all__ = [
    "SHARD_END",
    "AsyncBaseProcessor",
    "AsyncRecordProcessor",
    "BaseProcessor",
    "CallbackAbortedError",
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
    "WorkerStateError",
    "__version__",
    "create_worker",
]
