"""Test helpers shared by the unit tests: a recording processor and a worker on in-memory fakes."""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from consumer.checkpoint.store import CheckpointItem
from consumer.clock import Clock, SystemClock
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
from consumer.leases.liveness import OwnValidity
from consumer.leases.memory import InMemoryCheckpointStore, InMemoryLeaseRepository, InMemoryTables
from consumer.leases.model import Lease
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.messages import ShardFinished
from consumer.lifecycle.processor import (
    BaseProcessor,
    InitializationInput,
    LeaseLostInput,
    ProcessRecordsInput,
    ShardEndedInput,
    ShutdownRequestedInput,
)
from consumer.lifecycle.shard_consumer import ConsumerContext, ShardConsumer
from consumer.lifecycle.worker import Worker
from consumer.metrics.sink import InMemoryMetrics
from consumer.retrieval.memory import InMemoryKinesis
from consumer.sinks.dlq import DeadLetterQueue


@dataclass
class Journal:
    """Everything every processor saw, in order, across workers."""

    deliveries: list[tuple[str, str, str, int, int]] = field(
        default_factory=list
    )  # worker, shard, seq, sub, epoch
    events: list[tuple[str, str, str]] = field(default_factory=list)  # worker, shard, event
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: set[str] = field(default_factory=set)  # the threads async callbacks ran on

    def sequences(self, shard: str | None = None) -> list[str]:
        with self.lock:
            return [d[2] for d in self.deliveries if shard is None or d[1] == shard]


class RecordingProcessor(BaseProcessor):
    def __init__(
        self, journal: Journal, worker: str, fail: Callable[[bytes], bool] | None = None, manual: bool = False
    ) -> None:
        self.j = journal
        self.worker = worker
        self.fail = fail
        self.manual = manual
        self.shard = ""

    def initialize(self, data: InitializationInput) -> None:
        self.shard = data.shard_id
        with self.j.lock:
            self.j.events.append((self.worker, data.shard_id, f"init:{data.starting_position}"))

    def process_records(self, data: ProcessRecordsInput) -> None:
        for r in data.records:
            if self.fail is not None and self.fail(r.data):
                raise RuntimeError(f"cannot process {r.data!r}")
        with self.j.lock:
            for r in data.records:
                self.j.deliveries.append(
                    (self.worker, r.shard_id, r.sequence_number, r.sub_sequence_number, data.epoch)
                )
        if self.manual:
            for r in data.records:
                r.done()

    def lease_lost(self, data: LeaseLostInput) -> None:
        with self.j.lock:
            self.j.events.append((self.worker, data.shard_id, "lease_lost"))

    def shard_ended(self, data: ShardEndedInput) -> None:
        with self.j.lock:
            self.j.events.append((self.worker, self.shard, "shard_ended"))
        data.checkpointer.checkpoint()

    def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        with self.j.lock:
            self.j.events.append((self.worker, self.shard, "shutdown_requested"))
        data.checkpointer.checkpoint()


class AsyncRecordingProcessor(AsyncBaseProcessor):
    """``RecordingProcessor`` with ``async def`` callbacks: it awaits between records (so shards interleave on
    the worker's one event loop), checkpoints with ``acheckpoint``, and notes which threads ran it."""

    def __init__(
        self, journal: Journal, worker: str, fail: Callable[[bytes], bool] | None = None, manual: bool = False
    ) -> None:
        self.sync = RecordingProcessor(journal, worker, fail, manual)
        self.threads: set[str] = journal.threads

    def _note_thread(self) -> None:
        with self.sync.j.lock:
            self.threads.add(threading.current_thread().name)

    async def initialize(self, data: InitializationInput) -> None:
        self._note_thread()
        await asyncio.sleep(0)
        self.sync.initialize(data)

    async def process_records(self, data: ProcessRecordsInput) -> None:
        self._note_thread()
        await asyncio.sleep(0)
        self.sync.process_records(data)

    async def lease_lost(self, data: LeaseLostInput) -> None:
        self._note_thread()
        self.sync.lease_lost(data)

    async def shard_ended(self, data: ShardEndedInput) -> None:
        self._note_thread()
        with self.sync.j.lock:
            self.sync.j.events.append((self.sync.worker, self.sync.shard, "shard_ended"))
        await data.checkpointer.acheckpoint()

    async def shutdown_requested(self, data: ShutdownRequestedInput) -> None:
        self._note_thread()
        with self.sync.j.lock:
            self.sync.j.events.append((self.sync.worker, self.sync.shard, "shutdown_requested"))
        await data.checkpointer.acheckpoint()


PROCESSOR_KINDS = ("sync", "async")


FAST_LEASES = LeaseConfig(
    lease_duration=1.0,
    safety_margin=0.3,
    scan_interval=0.1,
    inbox_poll_interval=0.02,
    idle_poll_interval=0.05,
    leader_check_interval=0.05,
    discovery_interval=0.2,
)


def make_worker(
    worker_id: str,
    tables: InMemoryTables,
    kinesis: InMemoryKinesis,
    journal: Journal,
    *,
    streams: tuple[str, ...] = ("s",),
    fail: Callable[[bytes], bool] | None = None,
    processing: ProcessingConfig | None = None,
    dlq: DeadLetterQueue | None = None,
    checkpoint: CheckpointConfig | None = None,
    lease: LeaseConfig = FAST_LEASES,
    clock: Clock | None = None,
    retrieval: RetrievalConfig | None = None,
    wrap_repo: Callable[[InMemoryLeaseRepository], Any] | None = None,
    wrap_checkpoints: Callable[[InMemoryCheckpointStore], Any] | None = None,
    kind: str = "sync",
    processor: Callable[[], Any] | None = None,
    threads: ThreadsConfig | None = None,
) -> Worker:
    manual = checkpoint is not None and checkpoint.mode == "manual"
    processor_class = {"sync": RecordingProcessor, "async": AsyncRecordingProcessor}[kind]
    factory: Callable[[], Any] = processor or (lambda: processor_class(journal, worker_id, fail, manual))
    config = WorkerConfig(
        application="app",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id=worker_id,
        streams=tuple(StreamSpec(name, factory) for name in streams),
        lease=lease,
        retrieval=retrieval
        or RetrievalConfig(idle_time_between_reads=0.01, max_records=50, reads_per_second=100),
        processing=processing or ProcessingConfig(backoff_base=0.001, backoff_max=0.01),
        checkpoint=checkpoint or CheckpointConfig(),
        shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
        threads=threads or ThreadsConfig(),
    )
    repo = InMemoryLeaseRepository(tables)
    return Worker(
        config,
        wrap_repo(repo) if wrap_repo is not None else repo,
        (wrap_checkpoints or (lambda x: x))(InMemoryCheckpointStore(tables)),
        kinesis,
        dlq=dlq,
        metrics=InMemoryMetrics(),
        clock=clock,
    )


def start(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def lone_shard_consumer(
    kinesis: InMemoryKinesis,
    processor: Callable[[], Any],
    retrieval: RetrievalConfig,
    *,
    checkpoint: CheckpointConfig | None = None,
    lease: LeaseConfig | None = None,
) -> tuple[ShardConsumer, queue.Queue[ShardFinished], InMemoryTables, str]:
    """A shard consumer of stream ``s``'s one shard at epoch 1 (checkpointed at nothing yet), on real time
    with a validity of a minute, outside any worker; its ``ShardFinished`` lands in the queue."""
    kinesis.create_stream("s", 1)
    shard = kinesis.list_shards("s")[0].shard_id
    tables = InMemoryTables()
    tables.checkpoints[("s", shard)] = CheckpointItem("s", shard, 1, None)
    config = WorkerConfig(
        application="app",
        lease_table="leases",
        checkpoint_table="checkpoints",
        worker_id="w1",
        streams=(StreamSpec("s", processor),),
        lease=lease or LeaseConfig(),
        retrieval=retrieval,
        checkpoint=checkpoint or CheckpointConfig(),
        shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
    )
    clock = SystemClock()
    validity = OwnValidity(clock, 60.0)
    validity.extend(clock.monotonic())
    finished: queue.Queue[ShardFinished] = queue.Queue()
    ctx = ConsumerContext(
        config,
        kinesis,
        InMemoryCheckpointStore(tables),
        None,
        InMemoryMetrics(),
        validity,
        clock,
        finished.put,
    )
    return ShardConsumer(Lease("s", shard, "w1", 1), config.streams[0], ctx), finished, tables, shard


def raw_sink_env(**settings: str) -> dict[str, str]:
    """The environment of a `python -m consumer run` of the raw S3 sink with ``settings``; no AWS endpoint
    answers (127.0.0.1:9), so a setting the checks let through fails at the first call."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONSUMER_", "RAW_", "AWS_"))}
    env.update(
        CONSUMER_APPLICATION="lake",
        CONSUMER_STREAMS="orders",
        CONSUMER_PROCESSOR="consumer.sinks.raw_s3:RawS3Sink",
        CONSUMER_LEASE_TABLE="leases",
        CONSUMER_CHECKPOINT_TABLE="checkpoints",
        CONSUMER_RAW_BUCKET="lake-raw",
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",  # nothing listens: a setting let through fails otherwise
        AWS_EC2_METADATA_DISABLED="true",
    )
    env.update(settings)
    return env


@contextmanager
def quiet_loggers(*modules: ModuleType) -> Iterator[None]:
    """The loggers of ``modules`` silenced for the block: a test that walks every event everywhere makes the
    machines' notes (backoffs, give-ups) noise, not news."""
    logs = [logging.getLogger(m.__name__) for m in modules]
    for log in logs:
        log.disabled = True
    try:
        yield
    finally:
        for log in logs:
            log.disabled = False


class Orders(BaseProcessor):
    """A processor that does nothing: what the embedding tests build a worker of."""

    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


#: A typed config of one stream, ``orders``, and its two tables: the embedding tests' worker.
ORDERS_CONFIG = WorkerConfig(
    application="orders",
    lease_table="orders-leases",
    checkpoint_table="orders-checkpoints",
    streams=(StreamSpec("orders", Orders),),
)
