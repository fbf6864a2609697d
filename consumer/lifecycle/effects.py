"""Carries out the coordinator's actions against DynamoDB, Kinesis and the shard consumers, and turns each
outcome into an event. The one place where a provider error becomes a decision: a condition that failed is
a ``CONFLICT``; anything else is ``FAILED`` and the coordinator retries it on its own schedule."""

from __future__ import annotations

import logging
from collections.abc import Callable

from consumer.clock import Clock
from consumer.errors import LeaseConflictError, MissingResourceError, WorkerFencedError, is_retriable
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Lease, WorkerItem
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.messages import (
    Action,
    ActionResult,
    Deregister,
    Discover,
    Discovered,
    Event,
    Forget,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    LeaseWrite,
    Metric,
    ReadInbox,
    ReadTable,
    Reconcile,
    Reconciled,
    Renew,
    Result,
    Start,
    Stop,
    TableRead,
    WriteKind,
)
from consumer.logs import log_event
from consumer.metrics.sink import MetricsSink
from consumer.retrieval.discovery import sync_leases
from consumer.retrieval.kinesis import KinesisApi

__all__ = ["Effects", "ShardRunners"]

logger = logging.getLogger(__name__)


class ShardRunners:
    """Starts and stops shard consumers; implemented by the worker shell over ``ShardConsumer``."""

    def __init__(self, start: Callable[[Lease], None], stop: Callable[[Stop], None]) -> None:
        self.start = start
        self.stop = stop


def _describe(exc: Exception) -> str:
    kind = "transient" if is_retriable(exc) else "unexpected"
    return f"{kind}: {exc!r}"


class Effects:
    def __init__(
        self,
        worker_id: str,
        repo: LeaseRepository,
        kinesis: KinesisApi,
        streams: tuple[str, ...],
        runners: ShardRunners,
        validity: OwnValidity,
        metrics: MetricsSink,
        clock: Clock,
    ) -> None:
        self._id = worker_id
        self._repo = repo
        self._kinesis = kinesis
        self._streams = streams
        self._runners = runners
        self._validity = validity
        self._metrics = metrics
        self._clock = clock

    def run(self, action: Action) -> Event | None:
        match action:
            case Heartbeat():
                return self._heartbeat(action)
            case Renew():
                self._validity.extend(action.sent_at)
            case ReadInbox():
                return self._guard(lambda: InboxRead(self._repo.get_worker(self._id)), InboxRead, None)
            case ReadTable():
                return self._guard(lambda: TableRead(self._repo.snapshot()), TableRead, None)
            case Reconcile():
                return self._guard(self._reconcile, Reconciled, None, None)
            case Discover():
                return self._discover(action)
            case Start():
                self._runners.start(action.lease)
            case Stop():
                self._runners.stop(action)
            case LeaseWrite():
                return self._write(action)
            case Forget():
                self._forget(action.worker)
            case Metric():
                self._metrics.add(action.name, action.value, action.stream, action.shard)
            case Deregister():
                self._deregister()
        return None

    @staticmethod
    def _guard(call: Callable[[], Event], failed: Callable[..., Event], *empty: object) -> Event:
        try:
            return call()
        except Exception as exc:  # DynamoDB unreachable or throttled: the coordinator retries on schedule
            return failed(*empty, error=_describe(exc))

    def _heartbeat(self, a: Heartbeat) -> Event:
        sent = self._clock.monotonic()
        try:
            self._repo.heartbeat(self._id, a.generation, a.lease_count, a.draining)
        except WorkerFencedError:
            return HeartbeatResult(sent, Result.CONFLICT, fenced=True)
        except Exception as exc:
            return HeartbeatResult(sent, Result.FAILED, error=_describe(exc))
        return HeartbeatResult(sent, Result.OK)

    def _reconcile(self) -> Event:
        me = self._repo.get_worker(self._id)
        if me is None:  # a live worker forgot us after a long silence: join again, holding nothing new
            log_event(logger, "worker_reregistered", logging.WARNING, worker=self._id)
            self._repo.register_worker(WorkerItem(self._id, started_ms=self._clock.wall_ms()))
            me = self._repo.get_worker(self._id)
        return Reconciled(me, self._repo.snapshot())  # read after re-registering: takes since are visible

    def _discover(self, a: Discover) -> Event:
        changed = False
        for stream in self._streams:
            try:
                changed |= bool(sync_leases(self._kinesis, self._repo, stream, a.leases))
            except MissingResourceError:
                logger.error("stream missing", extra={"event": "discovery_failed", "stream": stream})
            except Exception as exc:
                log_event(logger, "discovery_failed", logging.WARNING, stream=stream, error=_describe(exc))
        return Discovered(changed)

    def _write(self, a: LeaseWrite) -> Event:
        try:
            new = self._do_write(a)
        except LeaseConflictError as exc:
            log_event(
                logger,
                "lease_race_lost",
                logging.INFO,
                action=a.kind.value,
                lease=a.lease.key,
                error=str(exc),
            )
            return ActionResult(a.kind, a.lease, Result.CONFLICT, to=a.to, error=str(exc))
        except Exception as exc:
            log_event(
                logger,
                "lease_write_failed",
                logging.WARNING,
                action=a.kind.value,
                lease=a.lease.key,
                error=_describe(exc),
            )
            return ActionResult(a.kind, a.lease, Result.FAILED, to=a.to, error=_describe(exc))
        if a.kind is WriteKind.TRANSFER:
            log_event(
                logger, "lease_handed_over", worker=self._id, lease=a.lease.key, to=a.to, epoch=new.epoch
            )
        elif a.kind is WriteKind.RELEASE:
            log_event(logger, "lease_released", worker=self._id, lease=a.lease.key)
        return ActionResult(a.kind, a.lease, Result.OK, new=new, to=a.to)

    def _do_write(self, a: LeaseWrite) -> Lease:
        repo, lease = self._repo, a.lease
        match a.kind:
            case WriteKind.TAKE:
                return repo.take(lease, self._id, a.dead_owner)
            case WriteKind.TRANSFER:
                assert a.to is not None
                return repo.transfer(lease, a.to)
            case WriteKind.RELEASE:
                return repo.release(lease)
            case WriteKind.END:
                return repo.mark_ended(lease)
            case WriteKind.HALT:
                at = str(a.halted_at) if a.halted_at is not None else "unknown"
                return repo.mark_halted(lease, at, self._clock.wall_ms())
            case WriteKind.REQUEST:
                return repo.request_handoff(lease, self._id, self._clock.wall_ms())
            case WriteKind.DECLINE:
                return repo.clear_handoff(lease)
        raise AssertionError(a.kind)

    def _forget(self, worker: WorkerItem) -> None:
        try:
            self._repo.forget_worker(worker)
        except Exception as exc:  # it came back, somebody else forgot it first, or DynamoDB failed
            log_event(logger, "forget_failed", logging.INFO, dead=worker.worker_id, error=_describe(exc))

    def _deregister(self) -> None:
        try:
            self._repo.deregister_worker(self._id)
        except Exception as exc:  # its item then looks like a dead worker's to the others
            log_event(logger, "deregister_failed", logging.WARNING, error=_describe(exc))
