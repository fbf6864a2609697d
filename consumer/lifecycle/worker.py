"""The worker: a thin shell that steps the coordinator and carries out its actions.

One coordinator thread; every shard machine runs on the worker's ``ShardRunner`` (one scheduler thread and two
bounded pools, ``threads.*``), and each reports back through the one event queue; asyncio processors'
coroutines run on one event loop shared by the worker's shards.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING, Unpack, cast

from consumer.checkpoint.store import CheckpointStore
from consumer.clock import Clock, SystemClock
from consumer.config import WorkerConfig, polling_rate_warning
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Lease
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.control import BackgroundControl
from consumer.lifecycle.coordinator import Coordinator
from consumer.lifecycle.effects import Effects, ShardRunners
from consumer.lifecycle.event_loop import EventLoopThread
from consumer.lifecycle.fanout_start import FanOutConsumers
from consumer.lifecycle.handoff_writes import HandoffWriter
from consumer.lifecycle.lanes import BackgroundLane, HeartbeatLane
from consumer.lifecycle.leader_discovery import count_throttle
from consumer.lifecycle.messages import (
    Action,
    Deregister,
    Event,
    LeaseWrite,
    ShardFinished,
    ShutdownRequested,
    Stop,
    WriteKind,
)
from consumer.lifecycle.ownership import Ownership
from consumer.lifecycle.pools import GrowingPool
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.progress import ShardProgress
from consumer.lifecycle.shard_consumer import ShardConsumer
from consumer.lifecycle.shard_runner import ShardRunner
from consumer.lifecycle.shard_start import ConsumerContext
from consumer.lifecycle.slow_calls import SlowCallWatch
from consumer.logs import log_event
from consumer.metrics.sink import InMemoryMetrics, MetricsSink
from consumer.retrieval.kinesis import FanOutApi, KinesisApi
from consumer.sinks.dlq import DeadLetterQueue

if TYPE_CHECKING:
    from consumer.embed import CreateOptions

__all__ = ["Worker"]

logger = logging.getLogger(__name__)

_HEARTBEAT_RETRY = 0.5  # seconds before a failed heartbeat is sent again (less with short windows)
# The writes a step's run of hand-offs hands to the HandoffWriter (releases and transfers, e.g. a shutdown's).
_HANDOFFS = (WriteKind.RELEASE, WriteKind.TRANSFER)


class Worker(BackgroundControl):
    """One member of the fleet: it registers, takes its share of the shards' leases, runs a processor per
    shard, hands leases over cooperatively, and deregisters when stopped.

    Build one on AWS clients with ``Worker.create(config, session=...)`` (start-up checks included), or
    inject the seams (repository, checkpoint store, Kinesis) directly as the tests do. Run it in the
    foreground with ``run()``, or in the background with ``start()`` / ``stop(timeout)`` / ``join()`` or a
    ``with`` block; no signal handler is installed unless asked (``handle_signals=True``).
    """

    @classmethod
    def create(cls, config: WorkerConfig | None = None, **options: Unpack[CreateOptions]) -> Worker:
        """A worker on AWS clients, checked before it is returned: ``consumer.create_worker`` (its
        keyword arguments: ``processor``, ``env``, ``session``, ``region``, ``endpoint_url``, ``endpoints``,
        ``checks``, ``metrics``, ``metrics_out``, ``metrics_interval``)."""
        from consumer.embed import create_worker

        return create_worker(config, **options)

    def __init__(
        self,
        config: WorkerConfig,
        leases: LeaseRepository,
        checkpoints: CheckpointStore,
        kinesis: KinesisApi,
        *,
        dlq: DeadLetterQueue | None = None,
        metrics: MetricsSink | None = None,
        clock: Clock | None = None,
        metrics_interval: float = 10.0,
        fanout: FanOutApi | None = None,
        heartbeats: LeaseRepository | None = None,
    ) -> None:
        """The engine on injected seams. ``heartbeats``: the repository the heartbeat lane writes through
        (a client of its own with short timeouts; default ``leases``)."""
        self.config = config
        self.id = config.worker_id
        self._repo = leases
        self._kinesis = kinesis
        self._clock = clock or SystemClock()
        self.metrics = metrics or InMemoryMetrics()
        self.validity = OwnValidity(self._clock, config.lease.owner_validity)
        # A SimpleQueue: its put() is safe from a signal handler. queue.Queue's is not: SIGTERM's handler
        # (request_shutdown) can interrupt this thread inside get() while it holds the queue's lock, and
        # waiting for that lock there never ends (tests/unit/test_signals.py).
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.stopped = threading.Event()
        if fanout is None and hasattr(kinesis, "subscribe"):  # the adapters implement both
            fanout = cast(FanOutApi, kinesis)
        # What each shard loop last read (lag, last sequence), published with every heartbeat for `status`.
        self.progress = ShardProgress(self._clock)
        threads = config.threads
        self.runner = ShardRunner(
            self._clock,
            GrowingPool(f"fetch-{self.id}", threads.fetch_limit(config.retrieval.mode == "fanout")),
            GrowingPool(f"shards-{self.id}", threads.processor_threads),
            name=f"shard-runner-{self.id}",
        )
        self._ctx = ConsumerContext(
            config,
            kinesis,
            checkpoints,
            dlq,
            self.metrics,
            self.validity,
            self._clock,
            self._shard_finished,
            fanout,
            event_loop=EventLoopThread(f"asyncio-{self.id}", write_threads=config.threads.processor_threads),
            progress=self.progress,
            runner=self.runner,
            fanout_consumers=(
                FanOutConsumers(fanout, config.retrieval.fanout_consumer_name)
                if fanout is not None and config.retrieval.fanout_consumer_name is not None
                else None
            ),
        )
        self.consumers: dict[str, ShardConsumer] = {}
        self.coordinator = Coordinator(config, self._clock.monotonic())
        lease_cfg = config.lease
        streams = tuple(s.name for s in config.streams)
        self._heartbeat_lane = HeartbeatLane(
            self.id,
            heartbeats or leases,
            self.validity,
            self._clock,
            lease_cfg.heartbeat_every,
            min(_HEARTBEAT_RETRY, lease_cfg.heartbeat_every / 2),
            self._events.put,
            lapsed_every=1.5 * lease_cfg.lease_duration,
            progress=self.progress,
            failed=lambda exc: count_throttle(self.metrics, exc, *streams),
        )
        self._background = BackgroundLane(f"background-{self.id}", self._events.put)
        self._effects = Effects(
            self.id,
            leases,
            kinesis,
            streams,
            ShardRunners(self._start, self._stop),
            self.validity,
            self.metrics,
            self._clock,
            heartbeats=self._heartbeat_lane,
            background=self._background,
            lease_duration_ms=round(config.lease.lease_duration * 1000),
            initial_position=config.retrieval.initial_position,
        )
        self._handoffs = HandoffWriter(self._effects.run, self._effects.release_all, f"handoffs-{self.id}")
        self._metrics_interval = metrics_interval
        self._slow_calls = SlowCallWatch(config.lease.lease_duration)
        self._born = self._clock.monotonic()
        self._init_control()

    @property
    def owned(self) -> dict[str, Ownership]:
        """The leases this worker holds now and the phase of each, by key (a copy; for tests and stats)."""
        return dict(self.coordinator.owned)

    # -- public control ---------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Begin the graceful shutdown (safe from a signal handler: it only puts an event on the queue)."""
        self._events.put(ShutdownRequested())

    def run(self, *, handle_signals: bool = False) -> None:
        """Register, consume until shutdown is requested, then hand every lease over and deregister; in the
        calling thread. With ``handle_signals`` (main thread only), SIGTERM and SIGINT request the shutdown
        while it runs.

        Leases are created by the leader's discovery (ListShards), not by every worker at start. A worker runs
        once: ``run()`` after ``start()`` or after an earlier ``run()`` raises ``WorkerStateError`` before any
        call to AWS (create a new worker to run again), as does ``handle_signals`` off the main thread."""
        self._claim_run(handle_signals=handle_signals)
        if handle_signals:
            self._install_signal_handlers()
            try:
                self._run()
            finally:
                self._restore_signal_handlers()
            return
        self._run()

    def _run(self) -> None:
        if (warning := polling_rate_warning(self.config)) is not None:  # the settings, before any read
            log_event(logger, "config_warning", logging.WARNING, warning=warning)
        self._effects.register()
        log_event(logger, "worker_started", worker=self.id, streams=[s.name for s in self.config.streams])
        self._heartbeat_lane.start()
        try:
            try:
                self._register_fanout()
            except Exception:  # e.g. a missing stream: leave no member behind that owns nothing
                self._effects.run(Deregister())
                raise
            self._loop()
        finally:
            self._heartbeat_lane.stop()
            self._background.stop()
            self._join_consumers()
            self.runner.close()
            self._handoffs.close()
            self._ctx.event_loop.close(self.config.shutdown.final_checkpoint_timeout)
            self.metrics.flush()
            self.stopped.set()
            log_event(logger, "worker_stopped", worker=self.id)

    def _loop(self) -> None:
        next_metrics = self._clock.monotonic() + self._metrics_interval
        events: list[Event] = []
        while True:
            now = self._clock.monotonic()
            actions = self.coordinator.step(now, events)
            events = self._carry_out(actions)
            if self.coordinator.done:
                return
            if now >= next_metrics:
                self._flush_metrics()
                next_metrics = now + self._metrics_interval
            if events:  # and whatever the shard consumers reported meanwhile (a drained shard waits on it)
                events += self._waiting()
            else:
                wait = min(self.coordinator.next_due(), next_metrics) - self._clock.monotonic()
                events = self._wait(max(0.0, wait))

    def _carry_out(self, actions: list[Action]) -> list[Event]:
        """Each action's event, in order. A run of hand-off writes in a row goes out at once (``HandoffWriter``),
        so that a shutdown's releases do not queue one behind another; what follows the run waits for all of
        it."""
        events: list[Event] = []
        run: list[LeaseWrite] = []
        for action in [*actions, None]:
            if isinstance(action, LeaseWrite) and action.kind in _HANDOFFS:
                run.append(action)
                continue
            events += self._handoffs.write(run) if run else []
            run = []
            if action is not None and (event := self._effects.run(action)) is not None:
                events.append(event)
        return events

    def _wait(self, timeout: float) -> list[Event]:
        """The events that arrived within ``timeout`` (all of them, once the first is here)."""
        try:
            first = self._events.get(timeout=timeout)
        except queue.Empty:
            return []
        return [first, *self._waiting()]

    def _waiting(self) -> list[Event]:
        events: list[Event] = []
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    # -- shard consumers --------------------------------------------------------------------------
    def _shard_finished(self, event: ShardFinished) -> None:
        """A shard loop's one answer: it reads no more, so its progress is no longer published."""
        self.progress.forget(event.key)
        self._events.put(event)

    def _start(self, lease: Lease) -> None:
        self._release_finished()
        consumer = ShardConsumer(lease, self.config.stream(lease.stream), self._ctx)
        self.consumers[lease.key] = consumer
        consumer.start()

    def _stop(self, stop: Stop) -> None:
        consumer = self.consumers.get(stop.key)
        if consumer is not None:
            consumer.stop(stop.reason, last_poll=stop.last_poll)

    def _release_finished(self) -> None:
        """Drop the shard consumers whose loop has ended (and their processors with them): a worker that
        held thousands of leases over its life keeps only those it runs now."""
        for key in [k for k, c in self.consumers.items() if c.finished]:
            del self.consumers[key]

    def _join_consumers(self) -> None:
        """Wait for the shard consumers. After a graceful shutdown they have all ended (or been stopped as
        lost at the deadline); when the loop ended on an error, any still running is stopped as lost first
        (it may not deliver on a lease nobody renews any more), so that the exit does not wait a final
        checkpoint timeout per shard."""
        for consumer in self.consumers.values():
            if not consumer.finished:
                consumer.stop(ShutdownReason.LEASE_LOST)
        # They end concurrently on the runner's pools: one timeout in all, not one each (real time: a join).
        deadline = time.monotonic() + self.config.shutdown.final_checkpoint_timeout
        for consumer in self.consumers.values():
            consumer.join(max(0.0, deadline - time.monotonic()))

    # -- the rest ---------------------------------------------------------------------------------
    def _register_fanout(self) -> None:
        """Enhanced fan-out: one registered stream consumer per stream, shared by the whole fleet (found or
        registered under the retry policy of ``fanout_start``: a fleet starting at once is throttled)."""
        retrieval = self.config.retrieval
        if retrieval.mode != "fanout":
            return
        consumers = self._ctx.fanout_consumers
        assert consumers is not None
        for spec in self.config.streams:
            arn = consumers.ready(spec.name)
            log_event(logger, "fanout_consumer_ready", stream=spec.name, arn=arn)

    def call_counts(self) -> dict[str, dict[str, int]]:
        """DynamoDB and Kinesis requests made so far, by table role and operation (for cost figures)."""
        out: dict[str, dict[str, int]] = {}
        for role, source in (
            ("lease_table", self._repo),
            ("checkpoint_table", self._ctx.checkpoints),
            ("kinesis", self._kinesis),
        ):
            calls = getattr(source, "calls", None)
            counts = getattr(calls, "counts", calls)
            if isinstance(counts, dict):
                out[role] = dict(counts)
        return out

    def _flush_metrics(self) -> None:
        self._release_finished()
        owned = self.owned
        log_event(
            logger,
            "worker_stats",
            worker=self.id,
            uptime_s=round(self._clock.monotonic() - self._born, 3),
            leases=len(owned),
            calls=self.call_counts(),
        )
        calls = [c.work.calling for c in self.consumers.values()]
        slow = self._slow_calls.check(self._clock.monotonic(), [c for c in calls if c is not None])
        for stream in sorted(
            {s.name for s in self.config.streams} | {o.lease.stream for o in owned.values()}
        ):
            # Every stream we consume, 0 included: a gauge that stops being sent would read as its last value.
            mine = [o for o in owned.values() if o.lease.stream == stream]
            self.metrics.add("LeasesHeld", len(mine), stream)
            # A gauge, not a count of events: the alarm holds for as long as a shard stays halted.
            self.metrics.add("HaltedShards", sum(o.halted for o in mine), stream)
            self.metrics.add("ProcessorCallsSlow", slow.get(stream, 0), stream)  # a gauge, as above
        self.metrics.flush()
