"""Carries out the coordinator's actions against DynamoDB, Kinesis and the shard consumers, and turns each
outcome into an event. The one place where a provider error becomes a decision: a condition that failed is
a ``CONFLICT``; anything else is ``FAILED`` and the coordinator retries it on its own schedule."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import assert_never

from consumer.clock import Clock
from consumer.errors import LeaseConflictError, WorkerFencedError
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Leader, Lease, WorkerItem, new_incarnation
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.lanes import BackgroundLane, HeartbeatLane, HeartbeatParams
from consumer.lifecycle.leader_discovery import Discovery, count_throttle, describe
from consumer.lifecycle.messages import (
    AckGiven,
    Action,
    ActionResult,
    ClaimLeadership,
    Deregister,
    Discover,
    Event,
    Forget,
    Heartbeat,
    HeartbeatResult,
    InboxRead,
    LeaderRead,
    LeadershipResult,
    LeaderWatched,
    LeaseWrite,
    Metric,
    OwnRead,
    ReadInbox,
    ReadLeader,
    ReadOwn,
    ReadTable,
    Reconcile,
    Reconciled,
    Renew,
    ResignLeadership,
    Result,
    Start,
    Stop,
    TableRead,
    Wake,
    WatchLeader,
    WriteKind,
)
from consumer.lifecycle.retry import Verdict, verdict
from consumer.logs import log_event
from consumer.metrics.sink import MetricsSink
from consumer.retrieval.kinesis import KinesisApi

__all__ = ["Effects", "ShardRunners"]

logger = logging.getLogger(__name__)


class ShardRunners:
    """Starts and stops shard consumers; implemented by the worker shell over ``ShardConsumer``."""

    def __init__(self, start: Callable[[Lease], None], stop: Callable[[Stop], None]) -> None:
        self.start = start
        self.stop = stop


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
        *,
        heartbeats: HeartbeatLane | None = None,
        background: BackgroundLane | None = None,
        lease_duration_ms: int = 0,
        initial_position: str = "TRIM_HORIZON",
    ) -> None:
        """``heartbeats`` and ``background``: the lanes that keep heartbeats and discovery off the
        coordinator's thread (without them, as in the simulator, every action runs in the caller);
        ``lease_duration_ms``: ours, published when we register (again); ``initial_position``: the fleet's,
        which the leases discovery creates follow."""
        self._id = worker_id
        self._lease_duration_ms = lease_duration_ms
        self._heartbeats = heartbeats
        self._background = background
        self._repo = repo
        self._kinesis = kinesis
        self._streams = streams
        self._runners = runners
        self._validity = validity
        self._metrics = metrics
        self._clock = clock
        self._discovery = Discovery(repo, kinesis, metrics, clock, initial_position)

    def run(self, action: Action) -> Event | None:  # noqa: C901, PLR0911, PLR0912 - one case per action type
        """Carry ``action`` out; the event it leads to, if any (mypy checks that every action has a case)."""
        repo = self._repo
        match action:
            case Heartbeat():
                return self._heartbeat(action)
            case ReadInbox(final=final):  # a shutdown's final read is strongly consistent
                answer = partial(InboxRead, final=final)
                return self._guard(lambda: answer(repo.get_worker(self._id, consistent=final)), answer, None)
            case ReadTable():
                return self._guard(lambda: TableRead(repo.snapshot(consistent=False)), TableRead, None)
            case Reconcile():
                return self._guard(lambda: self._reconcile(action.keys), Reconciled, None, None)
            case ReadOwn():
                keys = action.keys
                return self._guard(lambda: OwnRead(keys, repo.get_leases(keys)), OwnRead, keys, None)
            case ReadLeader():
                return self._guard(lambda: LeaderRead(repo.get_leader()), LeaderRead, None)
            case WatchLeader():
                wid = action.worker_id
                watch = lambda: LeaderWatched(wid, repo.get_worker(wid, consistent=False))  # noqa: E731
                return self._guard(watch, LeaderWatched, wid, None)
            case ClaimLeadership():
                return self._claim(action)
            case Discover():
                return self._discover_soon(action)
            case LeaseWrite():
                return self._write(action)
            # The actions below lead to no event.
            case Renew():
                self._validity.extend(action.sent_at)
            case AckGiven():
                self._quietly(lambda: repo.ack_given(self._id, action.keys), "ack_failed")
            case ResignLeadership():
                self._quietly(lambda: self._resign(action.leader), "resign_failed")
            case Wake():
                self._quietly(lambda: repo.wake(action.worker_id), "wake_failed")
            case Start():
                self._runners.start(action.lease)
            case Stop():
                self._runners.stop(action)
            case Forget():
                self._forget(action.worker)
            case Metric():
                self._metrics.add(action.name, action.value, action.stream, action.shard)
            case Deregister():
                self._deregister()
            case _:
                assert_never(action)
        return None

    def _call(self, a: LeaseWrite) -> Lease:  # noqa: PLR0911 - one case per kind of write
        """The repository call that makes the write ``a`` (mypy checks that every kind has one)."""
        repo, clock = self._repo, self._clock
        match a.kind:
            case WriteKind.ASSIGN:
                return repo.assign(a.lease, a.to or "", a.dead_owner)
            case WriteKind.TRANSFER:
                return repo.transfer(a.lease, a.to or "")
            case WriteKind.RELEASE:
                return repo.release(a.lease, a.given_up)
            case WriteKind.END:
                return repo.mark_ended(a.lease)
            case WriteKind.HALT:
                return repo.mark_halted(a.lease, str(a.halted_at or "unknown"), clock.wall_ms())
            case WriteKind.REQUEST:
                return repo.request_handoff(a.lease, a.to or "", clock.wall_ms())
            case WriteKind.DECLINE:
                return repo.clear_handoff(a.lease)
            case _:
                assert_never(a.kind)

    def _guard(self, call: Callable[[], Event], failed: Callable[..., Event], *empty: object) -> Event:
        try:
            return call()
        except Exception as exc:  # unreachable or throttled: the coordinator retries on schedule
            count_throttle(self._metrics, exc, *self._streams)
            return failed(*empty, error=describe(exc))

    def _heartbeat(self, a: Heartbeat) -> Event | None:
        if self._heartbeats is not None:  # sent (and reported) by the heartbeat lane
            self._heartbeats.request(HeartbeatParams(a.generation, a.lease_count, a.draining, a.gone))
            return None
        sent = self._clock.monotonic()
        try:
            self._repo.heartbeat(self._id, a.generation, a.lease_count, a.draining, gone=a.gone)
        except WorkerFencedError:
            return HeartbeatResult(sent, Result.CONFLICT, fenced=True)
        except Exception as exc:  # a missed beat if it may pass (the window decides); else raised
            count_throttle(self._metrics, exc, *self._streams)
            return HeartbeatResult(sent, Result.FAILED, error=describe(exc))
        return HeartbeatResult(sent, Result.OK, draining=a.draining)

    def _quietly(self, call: Callable[[], None], event: str) -> None:
        """A write whose failure only delays things (it is made again, or its effect comes another way)."""
        try:
            call()
        except Exception as exc:  # if it may pass; else raised by describe
            count_throttle(self._metrics, exc, *self._streams)
            log_event(logger, event, logging.INFO, error=describe(exc))

    def _resign(self, leader: Leader) -> None:
        """Give the leadership item up; said only once it is written (a failed resign is ``resign_failed``:
        a follower claims a lease duration after our last heartbeat instead)."""
        self._repo.resign_leader(leader)
        log_event(logger, "leadership_resigned", worker=self._id, epoch=leader.epoch)

    def _claim(self, a: ClaimLeadership) -> Event:
        try:
            leader = self._repo.claim_leader(a.seen, self._id, a.dead)
        except LeaseConflictError as exc:
            return LeadershipResult(a, Result.CONFLICT, error=str(exc))
        except Exception as exc:  # if it may pass: claimed again on schedule; else raised by describe
            count_throttle(self._metrics, exc, *self._streams)
            return LeadershipResult(a, Result.FAILED, error=describe(exc))
        return LeadershipResult(a, Result.OK, leader)

    def register(self) -> None:
        """Write our worker item afresh (at start, and to join again after a live worker forgot us): a new
        incarnation, our streams and our lease duration."""
        self._repo.register_worker(
            WorkerItem(
                self._id,
                started_ms=self._clock.wall_ms(),
                streams=frozenset(self._streams),
                incarnation=new_incarnation(),
                lease_duration_ms=self._lease_duration_ms,
            )
        )

    def _reconcile(self, keys: tuple[str, ...]) -> Event:
        me = self._repo.get_worker(self._id)
        if me is None:  # a live worker forgot us after a long silence: join again, holding nothing new
            log_event(logger, "worker_reregistered", logging.WARNING, worker=self._id)
            self.register()
            me = self._repo.get_worker(self._id)
        asked = tuple(sorted({*keys, *(me.given if me is not None else ())}))
        return Reconciled(me, self._repo.get_leases(asked), asked)  # read after re-registering

    def _discover_soon(self, a: Discover) -> Event | None:
        if self._background is None:
            return self._discovery.run(a)
        self._background.submit(lambda: self._discovery.run(a))  # ListShards may be slow: not on our thread
        return None

    def _write(self, a: LeaseWrite) -> Event:
        try:
            new = self._call(a)
        except Exception as exc:
            # A condition that did not hold: the lease moved on. One that may pass: the coordinator retries.
            # Anything else is raised by describe.
            conflict = isinstance(exc, LeaseConflictError)
            count_throttle(self._metrics, exc, a.lease.stream)
            result, error = (Result.CONFLICT, str(exc)) if conflict else (Result.FAILED, describe(exc))
            event = "lease_race_lost" if conflict else "lease_write_failed"
            level = logging.INFO if conflict else logging.WARNING
            log_event(logger, event, level, action=a.kind.value, lease=a.lease.key, error=error)
            return ActionResult(a.kind, a.lease, result, to=a.to, error=error)
        if a.kind is WriteKind.TRANSFER:
            log_event(
                logger, "lease_handed_over", worker=self._id, lease=a.lease.key, to=a.to, epoch=new.epoch
            )
        elif a.kind is WriteKind.RELEASE:
            log_event(logger, "lease_released", worker=self._id, lease=a.lease.key)
        return ActionResult(a.kind, a.lease, Result.OK, new=new, to=a.to)

    def release_all(self, writes: Sequence[LeaseWrite]) -> list[Event] | None:
        """Plain releases (``given_up`` false, at most ``RELEASE_ALL_MAX``) in one write: each one's event, as
        ``run`` would give it; ``None`` if the write did not go through (nothing was released: run them one
        by one, so that each gets its own answer)."""
        try:
            released = self._repo.release_all([w.lease for w in writes])
        except Exception as exc:  # all or none: one lease that moved on, or a throttle, held back the rest
            conflict = isinstance(exc, LeaseConflictError)
            count_throttle(self._metrics, exc, writes[0].lease.stream)
            error = str(exc) if conflict else describe(exc)  # a bug is raised by describe
            log_event(logger, "lease_release_all_failed", logging.INFO, leases=len(writes), error=error)
            return None
        events: list[Event] = []
        for write, new in zip(writes, released, strict=True):
            log_event(logger, "lease_released", worker=self._id, lease=write.lease.key)
            events.append(ActionResult(write.kind, write.lease, Result.OK, new=new, to=write.to))
        return events

    def _forget(self, worker: WorkerItem) -> None:
        try:
            self._repo.forget_worker(worker)
        except LeaseConflictError as exc:  # it came back, or somebody else forgot it first
            log_event(logger, "forget_failed", logging.INFO, dead=worker.worker_id, error=str(exc))
        except Exception as exc:  # if it may pass: forgotten on a later scan; else raised by describe
            log_event(logger, "forget_failed", logging.INFO, dead=worker.worker_id, error=describe(exc))

    def _deregister(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.stop(timeout=1.0)  # no heartbeat after (or racing) the deregistration
        try:
            self._repo.deregister_worker(self._id)
        except Exception as exc:  # the last step of leaving, whatever failed: the item then looks like a dead
            # worker's to the others, who forget it; nothing is left for this worker to do about it (a bug, or
            # a refusal, is still shown with its traceback: it happens once)
            bug = verdict(exc) is Verdict.SURFACE
            logger.warning(
                "deregister_failed",
                exc_info=exc if bug else None,
                extra={"event": "deregister_failed", "error": repr(exc)},
            )
