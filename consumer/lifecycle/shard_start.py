"""Starting one shard's ownership: what the shard loop shares with the worker, everything done before the
first fetch (checkpoint read, processor, checkpoint policy), and the readers the loop opens."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from consumer.checkpoint.checkpointer import CheckpointWriter
from consumer.checkpoint.policy import (
    AnyPolicy,
    AutoCheckpoints,
    ExplicitCheckpoints,
    ManualCheckpoints,
)
from consumer.checkpoint.store import CheckpointStore
from consumer.clock import Clock
from consumer.config import PROCESSOR_CHECKPOINT_MODES, RetrievalConfig, StreamSpec, WorkerConfig
from consumer.errors import ConfigError, LeaseLostError, ProcessorSetupError
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Lease
from consumer.lifecycle.async_processor import adapt
from consumer.lifecycle.event_loop import EventLoopThread
from consumer.lifecycle.fanout_start import FanOutConsumers
from consumer.lifecycle.guard import ShardGuard
from consumer.lifecycle.messages import Outcome, ShardFinished
from consumer.lifecycle.processor import InitializationInput, RecordProcessor, Timers
from consumer.lifecycle.progress import ShardProgress
from consumer.lifecycle.retry_digest import RetryDigest
from consumer.logs import log_event
from consumer.metrics.sink import MetricsSink
from consumer.records import Position
from consumer.retrieval.fanout import FanOutReader
from consumer.retrieval.kinesis import FanOutApi, KinesisApi
from consumer.retrieval.polling import PollingReader
from consumer.retrieval.reader import ShardReader
from consumer.sinks.dlq import DeadLetterQueue

if TYPE_CHECKING:
    from consumer.lifecycle.shard_runner import ShardRunner

__all__ = ["ConsumerContext", "Started", "initial_position", "open_reader", "start_shard", "start_timestamp"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConsumerContext:
    config: WorkerConfig
    kinesis: KinesisApi
    checkpoints: CheckpointStore
    dlq: DeadLetterQueue | None
    metrics: MetricsSink
    validity: OwnValidity
    clock: Clock
    report: Callable[[ShardFinished], None]  # how the consumer's one answer reaches the coordinator
    fanout: FanOutApi | None = None
    fanout_consumers: FanOutConsumers | None = None  # fan-out: each stream's registered consumer
    # The worker's one event loop for asyncio processors (its thread starts only when one runs).
    event_loop: EventLoopThread = field(default_factory=lambda: EventLoopThread("asyncio-processors"))
    # What the shard loops read (each fetch taken); the worker's heartbeats publish it for `status`.
    progress: ShardProgress = field(default_factory=ShardProgress)
    # The worker's shards retrying a failure, told at a bounded rate whatever their number.
    retries: RetryDigest = field(default_factory=RetryDigest)
    # The worker's runner, which drives every shard machine on a few threads (None: a consumer built outside
    # a worker runs on a small runner of its own).
    runner: ShardRunner | None = None


@dataclass(frozen=True)
class Started:
    processor: RecordProcessor
    writer: CheckpointWriter
    policy: AnyPolicy
    start: Position | None  # the checkpoint the ownership started at
    initial: str  # where to start without one


def open_reader(ctx: ConsumerContext, lease: Lease, start: Position | None, initial: str) -> ShardReader:
    """A reader of the lease's shard after ``start`` (or at ``initial`` without one)."""
    cfg = ctx.config.retrieval
    common = (lease.stream, lease.shard_id, cfg)
    at = start_timestamp(lease, cfg)
    reader: ShardReader
    if cfg.mode == "fanout":
        assert ctx.fanout is not None and ctx.fanout_consumers is not None
        consumers = ctx.fanout_consumers
        reader = FanOutReader(
            ctx.fanout,
            consumers.arn(lease.stream),
            *common,
            after=start,
            initial_position=initial,
            clock=ctx.clock,
            timestamp=at,
            renew=lambda stale: consumers.renewed(lease.stream, stale),
        )
    else:
        reader = PollingReader(
            ctx.kinesis, *common, after=start, initial_position=initial, clock=ctx.clock, timestamp=at
        )
    return reader  # fetched ahead by the runner (retrieval.prefetch_batches), on its fetch pool


def initial_position(lease: Lease, configured: str) -> str:
    """Where a shard without a checkpoint starts: at ``configured``, except that a child shard (one whose lease
    names parents: those the application reads, ``consumer.retrieval.discovery.new_lease``) starts at
    ``TRIM_HORIZON`` under ``LATEST``: its parents were read to their end, and its first records come after
    theirs. Under ``AT_TIMESTAMP`` a child starts at the timestamp too: a child created after it starts at its
    first record anyway, and one created before it holds records from before it, which ``AT_TIMESTAMP``
    leaves out as it does in every other shard. (A child of a reshard made before the application first read
    the stream names no parent under ``LATEST``, so it starts at ``LATEST``.)"""
    if lease.parents and configured == "LATEST":
        return "TRIM_HORIZON"
    if configured == "LATEST" and lease.latest_ms is not None:
        return "AT_TIMESTAMP"  # LATEST as of the lease's creation, for every owner (``start_timestamp``)
    return configured


def start_timestamp(lease: Lease, config: RetrievalConfig) -> datetime | None:
    """The time an ``AT_TIMESTAMP`` start reads from: under ``LATEST``, when the lease was created
    (``Lease.latest_ms``), so that LATEST means the same for every owner of a shard without a checkpoint and
    for every new iterator (re-resolving it would skip what came in between: a take-over before the first
    checkpoint lost those records); otherwise the configured ``retrieval.initial_timestamp``."""
    if config.initial_position == "LATEST" and lease.latest_ms is not None:
        return datetime.fromtimestamp(lease.latest_ms / 1000, UTC)
    return config.initial_timestamp


def _where(lease: Lease, start: Position | None, initial: str, config: RetrievalConfig) -> dict[str, object]:
    """``shard_started``'s account of where the shard starts (and from what time, for AT_TIMESTAMP)."""
    if start is not None:
        return {"starting_position": str(start)}
    if initial != "AT_TIMESTAMP":
        return {"starting_position": initial}
    at = start_timestamp(lease, config)
    return {"starting_position": initial, "from_time": at.isoformat() if at is not None else None}


def start_shard(
    lease: Lease,
    spec: StreamSpec,
    ctx: ConsumerContext,
    guard: ShardGuard,
    wake: Callable[[], None] = lambda: None,
    timers: Timers | None = None,
) -> Started | Outcome:
    """Everything before the first fetch; ``LOST`` if the checkpoint's epoch is not ours, ``SHARD_END`` if
        the shard was already finished. Raises ``TransientError`` (the caller retries; ``ProcessorSetupError`` when
    the processor's factory or ``initialize`` raised) or, for a bug of ours, the error itself.
        ``wake``: called when records are marked done or a checkpoint is written (the runner steps the shard);
        ``timers``: the processor's, on the shard's lane."""
    stored = ctx.checkpoints.get(lease.stream, lease.shard_id)
    fields: dict[str, object] = {"stream": lease.stream, "shard": lease.shard_id, "epoch": lease.epoch}
    if stored is None or stored.epoch != lease.epoch:
        log_event(logger, "lease_moved_before_start", logging.WARNING, **fields)
        return Outcome.LOST
    start = stored.position
    if start is not None and start.is_shard_end:
        return Outcome.SHARD_END
    try:
        made = spec.processor_factory()
    except BaseException as exc:  # the processor's factory (user code): retried with backoff, as
        # initialize's; also SystemExit or CancelledError, which would otherwise end the pool's thread
        raise ProcessorSetupError(f"the processor's factory raised {type(exc).__name__}: {exc}") from exc
    processor = adapt(made, ctx.event_loop)
    # A processor that buffers (e.g. the raw S3 sink) declares manual mode: auto checkpoints would
    # count records as done the moment they were handed over.
    mode = getattr(made, "checkpoint_mode", ctx.config.checkpoint.mode)
    policy: AnyPolicy
    if mode == "manual":
        manual = ManualCheckpoints()
        manual.listen(wake)
        policy = manual
    elif mode == "explicit":  # only the processor's checkpoint(position) calls write (MultiLang)
        policy = ExplicitCheckpoints()
    elif mode == "auto":
        policy = AutoCheckpoints(start)
    else:  # the start-up checks refuse it first; a typo must not run as auto, records not done included
        raise ConfigError(  # the user's class, as the start-up checks name it (not the adapter in front)
            f"{type(made).__name__}.checkpoint_mode (stream {lease.stream!r})",
            f"must be one of {', '.join(PROCESSOR_CHECKPOINT_MODES)}; got {mode!r}",
        )

    def saved(_: Position) -> None:
        ctx.metrics.add("Checkpoints", 1, lease.stream, lease.shard_id)
        wake()  # e.g. the processor's own checkpoint(): the machine learns it without a poll

    writer = CheckpointWriter(
        ctx.checkpoints,
        lease.stream,
        lease.shard_id,
        guard,
        start,
        guard.mark_lost,
        saved,
        ctx.event_loop.offload,  # acheckpoint's writes: never queued behind the application's executor work
    )
    initial = initial_position(lease, ctx.config.retrieval.initial_position)
    try:
        processor.initialize(
            InitializationInput(
                lease.stream, lease.shard_id, lease.epoch, start, initial, guard, timers, ctx.metrics
            )
        )
    except LeaseLostError:
        raise
    except Exception as exc:  # retried with backoff: ``ProcessorSetupError``
        raise ProcessorSetupError(f"the processor's initialize raised {type(exc).__name__}: {exc}") from exc
    where = _where(lease, start, initial, ctx.config.retrieval)
    log_event(logger, "shard_started", logging.INFO, **where, **fields)
    return Started(processor, writer, policy, start, initial)
