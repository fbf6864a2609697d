"""Carries out the coordinator's actions against DynamoDB, Kinesis and the shard consumers, and turns each
outcome into an event. The one place where a provider error becomes a decision: a condition that failed is
a ``CONFLICT``; anything else is ``FAILED`` and the coordinator retries it on its own schedule."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import assert_never

from consumer.clock import Clock
from consumer.errors import LeaseConflictError, MissingResourceError, WorkerFencedError
from consumer.leases.liveness import OwnValidity
from consumer.leases.model import Leader, Lease, WorkerItem, new_incarnation
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.lanes import BackgroundLane, HeartbeatLane, HeartbeatParams
from consumer.lifecycle.messages import (
    AckGiven,
    Action,
    ActionResult,
    ClaimLeadership,
    Deregister,
    Discover,
    Discovered,
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
from consumer.lifecycle.retry import Verdict, is_throttle, operation, verdict
from consumer.logs import Repeated, log_event
from consumer.metrics.sink import MetricsSink
from consumer.retrieval.discovery import sync_leases
from consumer.retrieval.kinesis import KinesisApi, StreamMissingError

__all__ = ["Effects", "ShardRunners"]

logger = logging.getLogger(__name__)


class ShardRunners:
    """Starts and stops shard consumers; implemented by the worker shell over ``ShardConsumer``."""

    def __init__(self, start: Callable[[Lease], None], stop: Callable[[Stop], None]) -> None:
        self.start = start
        self.stop = stop


def _describe(exc: Exception) -> str:
    """A failure that may pass, for the event and the log; one that cannot (``retry.verdict``: a bug, a
    refusal, a missing table) is raised again instead, and ends the worker (``join()`` raises it): retrying it
    on schedule would only hide it while the fleet works around us."""
    if verdict(exc) is Verdict.SURFACE:
        raise exc
    return f"{'throttled' if is_throttle(exc) else 'transient'}: {exc!r}"


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
    ) -> None:
        """``heartbeats`` and ``background``: the lanes that keep heartbeats and discovery off the
        coordinator's thread (without them, as in the simulator, every action runs in the caller);
        ``lease_duration_ms``: ours, published when we register (again)."""
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
        self._discovery_failures: dict[str, Repeated] = {}  # per stream: told at a bounded rate
        self._discovery_refused: set[tuple[str, str]] = set()  # (stream, error type): traceback shown
        self._discovery_broken: set[str] = set()  # error types that escaped a discovery: traceback shown

    def run(self, action: Action) -> Event | None:  # noqa: C901, PLR0911, PLR0912 - one case per action type
        """Carry ``action`` out; the event it leads to, if any (mypy checks that every action has a case)."""
        repo = self._repo
        match action:
            case Heartbeat():
                return self._heartbeat(action)
            case ReadInbox():
                read_inbox = lambda: InboxRead(repo.get_worker(self._id, consistent=False))  # noqa: E731
                return self._guard(read_inbox, InboxRead, None)
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

    @staticmethod
    def _guard(call: Callable[[], Event], failed: Callable[..., Event], *empty: object) -> Event:
        try:
            return call()
        except Exception as exc:  # unreachable or throttled: the coordinator retries on schedule
            return failed(*empty, error=_describe(exc))

    def _heartbeat(self, a: Heartbeat) -> Event | None:
        if self._heartbeats is not None:  # sent (and reported) by the heartbeat lane
            self._heartbeats.request(HeartbeatParams(a.generation, a.lease_count, a.draining))
            return None
        sent = self._clock.monotonic()
        try:
            self._repo.heartbeat(self._id, a.generation, a.lease_count, a.draining)
        except WorkerFencedError:
            return HeartbeatResult(sent, Result.CONFLICT, fenced=True)
        except Exception as exc:  # a missed beat if it may pass (the window decides); else raised
            return HeartbeatResult(sent, Result.FAILED, error=_describe(exc))
        return HeartbeatResult(sent, Result.OK)

    @staticmethod
    def _quietly(call: Callable[[], None], event: str) -> None:
        """A write whose failure only delays things (it is made again, or its effect comes another way)."""
        try:
            call()
        except Exception as exc:  # if it may pass; else raised by _describe
            log_event(logger, event, logging.INFO, error=_describe(exc))

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
        except Exception as exc:  # if it may pass: claimed again on schedule; else raised by _describe
            return LeadershipResult(a, Result.FAILED, error=_describe(exc))
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
            return self._discovered(a)
        self._background.submit(lambda: self._discovered(a))  # ListShards may be slow: not on our thread
        return None

    def _discovered(self, a: Discover) -> Event:
        """``_discover``'s answer, always: the leader counts the next discovery from this event, so one that
        raised instead (a bug that escaped its handlers) would be the last. It is logged with its traceback
        (once until a discovery goes through), counted in ``DiscoveryFailures`` and answered as a discovery
        that listed nothing: the next one comes at its interval."""
        counted: set[str] = set()
        try:
            found = self._discover(a, counted)
        except Exception as exc:
            first = type(exc).__name__ not in self._discovery_broken
            self._discovery_broken.add(type(exc).__name__)
            logger.error(
                "discovery failed unexpectedly",
                exc_info=exc if first else None,
                extra={"event": "discovery_bug", "streams": list(a.streams), "error": repr(exc)},
            )
            for stream in a.streams:
                if stream not in counted:
                    self._count_error(stream, counted)
            return Discovered(False)
        self._discovery_broken.clear()
        return found

    def _count_error(self, stream: str, counted: set[str]) -> None:
        """One failed discovery of ``stream`` in ``DiscoveryFailures``, once per discovery (``counted``); a
        sink that fails is only logged: the count must not be what stops discovery."""
        counted.add(stream)
        try:
            self._metrics.add("DiscoveryFailures", 1, stream)
        except Exception:
            logger.exception(
                "metric not recorded", extra={"event": "metric_failed", "metric": "DiscoveryFailures"}
            )

    def _discover(self, a: Discover, counted: set[str]) -> Event:
        changed = more = False
        missing: set[str] = set()
        listed: set[str] = set()
        left = a.limit
        for stream in a.streams:
            if left <= 0:
                more = True
                break
            try:
                done, rest = sync_leases(self._kinesis, self._repo, stream, a.leases, left)
                changed, more, left = changed or bool(done), more or rest, left - done
                listed.add(stream)
                self._discovery_refused = {k for k in self._discovery_refused if k[0] != stream}
                if (told := self._discovery_failures.get(stream)) is not None:
                    told.passed(self._clock.monotonic(), stream=stream)
            except StreamMissingError as exc:  # Kinesis said so, for this stream: the leader decides (once)
                if exc.stream == stream:
                    missing.add(stream)
                else:  # never: ListShards names only this stream
                    log_event(logger, "discovery_failed", logging.WARNING, stream=stream, error=str(exc))
            except MissingResourceError as exc:  # e.g. the lease table: loud, every time
                self._count_error(stream, counted)
                logger.error(
                    "discovery failed",
                    extra={"event": "discovery_failed", "stream": stream, "error": str(exc)},
                )
            except Exception as exc:  # on the background lane: never let one stream's failure stall discovery
                self._count_error(stream, counted)
                self._count_throttle(exc, stream)
                if verdict(exc) is Verdict.SURFACE:  # a bug or a refusal: loud every time; its traceback
                    # once until the stream lists again (one per discovery_interval would bury the log)
                    kind = (stream, type(exc).__name__)
                    first = kind not in self._discovery_refused
                    self._discovery_refused.add(kind)
                    logger.error(
                        "discovery refused",
                        exc_info=exc if first else None,
                        extra={"event": "discovery_refused", "stream": stream, "error": repr(exc)},
                    )
                    continue
                told = self._discovery_failures.setdefault(
                    stream, Repeated(logger, "discovery_failed", "discovery_recovered")
                )
                told.failed(self._clock.monotonic(), stream=stream, error=_describe(exc))
        return Discovered(changed, more, frozenset(missing), frozenset(listed))

    def _write(self, a: LeaseWrite) -> Event:
        try:
            new = self._call(a)
        except Exception as exc:
            # A condition that did not hold: the lease moved on. One that may pass: the coordinator retries.
            # Anything else is raised by _describe.
            conflict = isinstance(exc, LeaseConflictError)
            self._count_throttle(exc, a.lease.stream)
            result, error = (Result.CONFLICT, str(exc)) if conflict else (Result.FAILED, _describe(exc))
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
            self._count_throttle(exc, writes[0].lease.stream)
            error = str(exc) if conflict else _describe(exc)  # a bug is raised by _describe
            log_event(logger, "lease_release_all_failed", logging.INFO, leases=len(writes), error=error)
            return None
        events: list[Event] = []
        for write, new in zip(writes, released, strict=True):
            log_event(logger, "lease_released", worker=self._id, lease=write.lease.key)
            events.append(ActionResult(write.kind, write.lease, Result.OK, new=new, to=write.to))
        return events

    def _count_throttle(self, exc: Exception, stream: str) -> None:
        """A throttled call is counted per operation (``Throttles.<Operation>``), as the shard loops count theirs."""
        if is_throttle(exc):
            self._metrics.add(f"Throttles.{operation(exc)}", 1, stream)

    def _forget(self, worker: WorkerItem) -> None:
        try:
            self._repo.forget_worker(worker)
        except LeaseConflictError as exc:  # it came back, or somebody else forgot it first
            log_event(logger, "forget_failed", logging.INFO, dead=worker.worker_id, error=str(exc))
        except Exception as exc:  # if it may pass: forgotten on a later scan; else raised by _describe
            log_event(logger, "forget_failed", logging.INFO, dead=worker.worker_id, error=_describe(exc))

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
