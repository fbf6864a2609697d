"""The worker: membership, heartbeats, lease planning and the shard consumers it runs.

One coordinator thread owns all lease-table writes except checkpoints; every shard runs on its own thread.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from consumer.checkpoint.store import CheckpointStore
from consumer.clock import Clock, SystemClock
from consumer.config import WorkerConfig
from consumer.errors import ConsumerError, LeaseConflictError, MissingResourceError, WorkerFencedError
from consumer.leases.liveness import LivenessTracker, OwnValidity
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.planner import Plan, PlanInput, plan
from consumer.leases.repository import LeaseRepository, OwnerObservation, TableSnapshot
from consumer.lifecycle.shard_consumer import ConsumerContext, Outcome, ShardConsumer
from consumer.logs import log_event
from consumer.metrics.sink import InMemoryMetrics, MetricsSink
from consumer.retrieval.discovery import sync_leases
from consumer.retrieval.kinesis import FanOutApi, KinesisApi
from consumer.sinks.dlq import DeadLetterQueue

__all__ = ["Worker"]

logger = logging.getLogger(__name__)


@dataclass
class _Owned:
    lease: Lease
    consumer: ShardConsumer | None
    give_to: str | None = None  # a hand-off in progress: transfer once the consumer drained


class Worker:
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
    ) -> None:
        self.config = config
        self.id = config.worker_id
        self._repo = leases
        self._kinesis = kinesis
        self._clock = clock or SystemClock()
        self.metrics = metrics or InMemoryMetrics()
        lc = config.lease
        self.validity = OwnValidity(self._clock, lc.owner_validity)
        self._liveness = LivenessTracker(self._clock, lc.lease_duration)
        self._wake = threading.Event()
        self._shutdown = threading.Event()
        self.stopped = threading.Event()
        self._ctx = ConsumerContext(
            config, kinesis, checkpoints, dlq, self.metrics, self.validity, self._clock, self._wake
        )
        self.owned: dict[str, _Owned] = {}
        self._generation = 0
        self._inbox = 0
        self._draining = False
        self._snapshot = TableSnapshot((), ())
        self._stall_reported: set[str] = set()
        self._scan_now = True
        now = self._clock.monotonic()
        self._next = {"heartbeat": now, "inbox": now, "scan": now, "discovery": now, "metrics": now}
        self._metrics_interval = metrics_interval
        self._streams = frozenset(s.name for s in config.streams)
        self._born = now

    def _read_table(self) -> TableSnapshot:
        """The lease table as far as this worker is concerned: worker items and the leases of its streams.

        (During a deploy that adds a stream, workers of the old version leave its leases to the new ones.)
        """
        snap = self._repo.snapshot()
        return TableSnapshot(tuple(x for x in snap.leases if x.stream in self._streams), snap.workers)

    # -- public control ---------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Begin the graceful shutdown (safe from a signal handler)."""
        self._shutdown.set()
        self._wake.set()

    def run(self) -> None:
        """Register, consume until shutdown is requested, then hand every lease over and deregister."""
        self._repo.register_worker(WorkerItem(self.id, started_ms=self._clock.wall_ms()))
        log_event(logger, "worker_started", worker=self.id, streams=[s.name for s in self.config.streams])
        try:
            try:
                self._snapshot = self._read_table()  # discovery creates only the leases nobody created yet
                self._discover(fail_fast=True)
                self._register_fanout()
            except Exception:  # e.g. a missing stream: leave no member behind that owns nothing
                self._deregister()
                raise
            while not self._shutdown.is_set():
                try:
                    self._tick()
                except Exception:  # never let one bad round kill the worker while it holds leases
                    logger.exception("coordinator round failed", extra={"event": "coordinator_error"})
                    self._shutdown.wait(0.5)
            self._graceful_shutdown()
        finally:
            self.metrics.flush()
            self.stopped.set()

    # -- the coordinator loop ---------------------------------------------------------------------
    def _due(self, what: str, now: float) -> bool:
        return now >= self._next[what]

    def _tick(self) -> None:
        lc = self.config.lease
        now = self._clock.monotonic()
        if self._due("heartbeat", now):
            self._heartbeat()
        if self._due("inbox", now):
            self._poll_inbox()
            self._next["inbox"] = now + lc.inbox_poll_interval
        self._reap()
        if self._scan_now or self._due("scan", now):
            self._scan_and_plan()
        if self._due("discovery", now):
            self._discover(fail_fast=False)
        if self._due("metrics", now):
            self._flush_metrics()
            self._next["metrics"] = now + self._metrics_interval
        wait = min(self._next.values()) - self._clock.monotonic()
        self._wake.wait(max(0.0, min(wait, lc.inbox_poll_interval)))
        self._wake.clear()

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

    def _log_stats(self) -> None:
        log_event(
            logger,
            "worker_stats",
            worker=self.id,
            uptime_s=round(self._clock.monotonic() - self._born, 3),
            leases=len(self.owned),
            calls=self.call_counts(),
        )

    def _flush_metrics(self) -> None:
        self._log_stats()
        for stream in {o.lease.stream for o in self.owned.values()}:
            self.metrics.add("LeasesHeld", sum(o.lease.stream == stream for o in self.owned.values()), stream)
        self.metrics.flush()

    def _heartbeat(self) -> None:
        sent = self._clock.monotonic()
        lc = self.config.lease
        try:
            self._repo.heartbeat(self.id, self._generation, len(self.owned), self._draining)
        except WorkerFencedError:
            self._reconcile()
            return
        except Exception as exc:  # DynamoDB unreachable or throttled: retry soon; validity runs out by itself
            log_event(
                logger,
                "heartbeat_failed",
                logging.WARNING,
                worker=self.id,
                error=repr(exc),
                validity_left_s=round(self.validity.remaining(), 2),
            )
            self._next["heartbeat"] = sent + min(1.0, lc.heartbeat_every / 3)
            return
        self.validity.extend(sent)
        self._next["heartbeat"] = sent + lc.heartbeat_every

    def _reconcile(self) -> None:
        """Our generation moved: somebody took leases of ours after our heartbeat lapsed. Drop those."""
        me = self._repo.get_worker(self.id)
        if me is None:
            raise ConsumerError(f"worker item {self.id} vanished from the lease table")
        self._generation = me.generation
        self._snapshot = self._read_table()
        current = {lease.key: lease for lease in self._snapshot.leases}
        for key, owned in list(self.owned.items()):
            now = current.get(key)
            if now is None or now.owner != self.id or now.epoch != owned.lease.epoch:
                self._lose(key, "fenced")
        log_event(
            logger,
            "worker_reconciled",
            logging.WARNING,
            worker=self.id,
            generation=self._generation,
            kept=sorted(self.owned),
        )
        self._next["heartbeat"] = self._clock.monotonic()

    def _poll_inbox(self) -> None:
        try:
            me = self._repo.get_worker(self.id)
        except Exception as exc:
            log_event(logger, "inbox_poll_failed", logging.WARNING, error=repr(exc))
            return
        if me is None:
            return
        if me.generation != self._generation:
            self._reconcile()
        if me.inbox != self._inbox:
            self._inbox = me.inbox
            self._scan_now = True
        if me.drain_requested and not self._shutdown.is_set():
            log_event(logger, "drain_requested", worker=self.id)
            self.request_shutdown()

    def _lose(self, key: str, why: str) -> None:
        owned = self.owned.pop(key)
        if owned.consumer is not None:
            owned.consumer.lease_lost()
        self.metrics.add("LeasesLost", 1, owned.lease.stream, owned.lease.shard_id)
        log_event(
            logger, "lease_lost", logging.WARNING, worker=self.id, lease=key, epoch=owned.lease.epoch, why=why
        )

    def _start(self, lease: Lease) -> None:
        consumer = ShardConsumer(lease, self.config.stream(lease.stream), self._ctx)
        self.owned[lease.key] = _Owned(lease, consumer)
        consumer.start()

    # -- scanning and planning ------------------------------------------------------------------
    def _scan_and_plan(self) -> None:
        self._scan_now = False
        self._next["scan"] = self._clock.monotonic() + self.config.lease.scan_interval
        try:
            snap = self._read_table()
        except Exception as exc:
            log_event(logger, "scan_failed", logging.WARNING, error=repr(exc))
            return
        self._snapshot = snap
        self._liveness.observe(snap.workers, snap.leases)
        for lease in snap.leases:
            owned = self.owned.get(lease.key)
            if owned is not None and (lease.owner != self.id or lease.epoch != owned.lease.epoch):
                self._lose(lease.key, "moved")
            elif owned is None and lease.owner == self.id and not lease.ended and not self._draining:
                log_event(logger, "lease_received", worker=self.id, lease=lease.key, epoch=lease.epoch)
                self.metrics.add("LeasesTaken", 1, lease.stream, lease.shard_id)
                self._start(lease)
            elif owned is not None:
                owned.lease = lease  # refresh hand-off request fields
        if self._draining or not self.validity.valid():
            return
        live = {w.worker_id for w in snap.workers if self._liveness.is_alive(w.worker_id)} | {self.id}
        dead = {}
        for lease in snap.leases:
            if lease.owner is not None and lease.owner not in live:
                obs = self._liveness.dead_owner(lease.owner)
                if obs is not None:
                    dead[lease.owner] = obs
        lc = self.config.lease
        result = plan(
            PlanInput(
                me=self.id,
                leases=snap.leases,
                live_workers=frozenset(live),
                draining_workers=frozenset(w.worker_id for w in snap.workers if w.draining),
                dead_owners=dead,
                now_ms=self._clock.wall_ms(),
                handoff_stall_ms=int(lc.handoff_stall_after * 1000),
                max_leases=lc.max_leases_per_worker,
            )
        )
        self._execute(result)

    def _execute(self, p: Plan) -> None:
        for lease, to in p.give:
            owned = self.owned.get(lease.key)
            if owned is None or owned.give_to is not None:
                continue
            owned.give_to = to
            log_event(logger, "handoff_started", worker=self.id, lease=lease.key, to=to)
            if owned.consumer is not None:
                owned.consumer.request_stop()
            else:
                self._transfer(lease.key, to)
        for lease in p.decline:
            self._attempt("decline", partial(self._repo.clear_handoff, lease))
        for lease in p.take:
            self._attempt("take", partial(self._take, lease, None))
        for lease, obs in p.steal:
            log_event(logger, "lease_expired", logging.WARNING, lease=lease.key, dead_owner=obs.worker_id)
            self._attempt("steal", partial(self._take, lease, obs))
        for lease in p.request:
            self._attempt("request", partial(self._request, lease))
        for lease in p.stalled:
            if lease.key not in self._stall_reported:
                self._stall_reported.add(lease.key)
                self.metrics.add("HandoffsStalled", 1, lease.stream, lease.shard_id)
                log_event(logger, "handoff_stalled", logging.WARNING, lease=lease.key, owner=lease.owner)
        self._stall_reported &= {x.key for x in self._snapshot.leases if x.handoff_to == self.id}

    def _attempt(self, what: str, action: Callable[[], object]) -> None:
        try:
            action()
        except LeaseConflictError as exc:
            log_event(logger, "lease_race_lost", logging.DEBUG, action=what, error=str(exc))
            self._scan_now = True
        except Exception as exc:  # a transient provider error: the next scan retries from fresh state
            log_event(logger, "lease_action_failed", logging.WARNING, action=what, error=repr(exc))
            self._scan_now = True

    def _request(self, lease: Lease) -> None:
        self._repo.request_handoff(lease, self.id, self._clock.wall_ms())
        self.metrics.add("HandoffsRequested", 1, lease.stream, lease.shard_id)  # only requests that were made

    def _take(self, lease: Lease, dead_owner: OwnerObservation | None) -> None:
        lease = self._repo.take(lease, self.id, dead_owner)
        self.metrics.add("LeasesTaken", 1, lease.stream, lease.shard_id)
        log_event(logger, "lease_taken", worker=self.id, lease=lease.key, epoch=lease.epoch)
        self._start(lease)

    def _transfer(self, key: str, to: str) -> bool:
        owned = self.owned.pop(key)
        try:
            new = self._repo.transfer(owned.lease, to)
        except Exception as exc:  # a lost race, or DynamoDB unreachable (every write here is conditional)
            log_event(logger, "handoff_failed", logging.WARNING, lease=key, to=to, error=repr(exc))
            self._scan_now = True  # still ours if nobody else changed it: the next scan restarts it
            return False
        consumer = owned.consumer
        if consumer is not None and consumer.stop_requested_at is not None:
            ms = (self._clock.monotonic() - consumer.stop_requested_at) * 1000
            self.metrics.add("HandoffLatencyMs", ms, new.stream, new.shard_id)
        log_event(logger, "lease_handed_over", worker=self.id, lease=key, to=to, epoch=new.epoch)
        return True

    def _reap(self) -> None:
        for key, owned in list(self.owned.items()):
            consumer = owned.consumer
            if consumer is None or not consumer.finished.is_set():
                continue
            outcome = consumer.outcome
            if outcome is Outcome.SHARD_END:
                self.owned.pop(key)
                self._attempt("end", partial(self._repo.mark_ended, owned.lease))
                self._scan_now = True
            elif outcome is Outcome.LOST:
                self._lose(key, "consumer")
            elif outcome is Outcome.STOPPED and owned.give_to is not None:
                self._transfer(key, owned.give_to)
            elif outcome in (Outcome.HALTED, Outcome.FAILED):
                owned.consumer = None  # keep the lease: nobody else may skip the failing record
                self.metrics.add("ShardsHalted", 1, owned.lease.stream, owned.lease.shard_id)

    def _register_fanout(self) -> None:
        """Enhanced fan-out: one registered stream consumer per stream, shared by the whole fleet."""
        retrieval = self.config.retrieval
        if retrieval.mode != "fanout":
            return
        api: FanOutApi = self._kinesis  # type: ignore[assignment]  # the adapters implement both
        assert retrieval.fanout_consumer_name is not None
        for spec in self.config.streams:
            self._ctx.fanout_arns[spec.name] = api.register_consumer(
                spec.name, retrieval.fanout_consumer_name
            )
            log_event(logger, "fanout_consumer_ready", stream=spec.name, arn=self._ctx.fanout_arns[spec.name])

    def _discover(self, *, fail_fast: bool) -> None:
        self._next["discovery"] = self._clock.monotonic() + self.config.lease.discovery_interval
        for spec in self.config.streams:
            try:
                if sync_leases(self._kinesis, self._repo, spec.name, self._snapshot.leases):
                    self._scan_now = True
            except MissingResourceError:
                if fail_fast:
                    raise
                logger.exception("discovery failed", extra={"event": "discovery_failed", "stream": spec.name})
            except Exception as exc:
                log_event(logger, "discovery_failed", logging.WARNING, stream=spec.name, error=repr(exc))

    # -- graceful shutdown ------------------------------------------------------------------------
    def _graceful_shutdown(self) -> None:
        """Stop taking, drain every shard, final checkpoints, hand each lease to the least-loaded live
        worker (or release it), deregister — all inside ``shutdown.deadline``."""
        started = self._clock.monotonic()
        deadline = started + self.config.shutdown.deadline
        self._draining = True
        log_event(logger, "shutdown_started", worker=self.id, leases=sorted(self.owned))
        self._heartbeat()  # tells the fleet we are draining: nobody hands us anything from now on
        successors = self._successors()
        for owned in self.owned.values():
            if owned.consumer is not None:
                owned.consumer.request_stop()
        while self.owned and self._clock.monotonic() < deadline:
            now = self._clock.monotonic()
            if self._due("heartbeat", now):
                self._heartbeat()
            for key, owned in list(self.owned.items()):
                if owned.consumer is None or owned.consumer.finished.is_set():
                    self._hand_over(key, owned, successors)
            self._wake.wait(0.02)
            self._wake.clear()
        left = sorted(self.owned)
        for key in left:
            consumer = self.owned[key].consumer
            if consumer is not None:
                consumer.lease_lost()  # it missed the deadline: leave the lease to expire, never to two owners
        self._deregister()
        log_event(
            logger,
            "shutdown_complete",
            worker=self.id,
            left_to_expire=left,
            seconds=round(self._clock.monotonic() - started, 3),
        )

    def _deregister(self) -> None:
        try:
            self._repo.deregister_worker(self.id)
        except Exception as exc:  # its item then looks like a dead worker's to the others
            log_event(logger, "deregister_failed", logging.WARNING, error=repr(exc))

    def _successors(self) -> Counter[str]:
        try:
            snap = self._read_table()
        except Exception:
            return Counter()
        self._liveness.observe(snap.workers, snap.leases)
        live = [
            w.worker_id
            for w in snap.workers
            if w.worker_id != self.id and not w.draining and self._liveness.is_alive(w.worker_id)
        ]
        load = Counter({w: 0 for w in live})
        for lease in snap.leases:
            if lease.owner is not None and lease.owner in load and not lease.ended:
                load[lease.owner] += 1
        return load

    def _hand_over(self, key: str, owned: _Owned, successors: Counter[str]) -> None:
        outcome = owned.consumer.outcome if owned.consumer is not None else Outcome.HALTED
        if outcome is Outcome.LOST:
            self.owned.pop(key)
            return
        if outcome is Outcome.SHARD_END:
            self.owned.pop(key)
            self._attempt("end", lambda: self._repo.mark_ended(owned.lease))
            return
        for to in sorted(successors, key=lambda w: (successors[w], w)):
            self.owned[key] = owned
            if self._transfer(key, to):
                successors[to] += 1
                return
            del successors[to]  # gone or draining: try the next one
        self.owned.pop(key, None)
        try:
            self._repo.release(owned.lease)
            log_event(logger, "lease_released", worker=self.id, lease=key)
        except Exception as exc:  # it then expires after the lease duration, as after a crash
            log_event(logger, "release_failed", logging.WARNING, lease=key, error=repr(exc))
