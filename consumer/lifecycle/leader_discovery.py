"""Discovery, as the coordinator's ``Discover`` action runs it: list each stream's shards and create the
leases of new ones (``consumer.retrieval.discovery.sync_leases``), stream by stream, and answer with one
``Discovered`` whatever happened. It runs on the background lane; a stream's failure is logged at a bounded
rate and counted in ``DiscoveryFailures`` (per stream), and never stalls the next discovery."""

from __future__ import annotations

import logging

from consumer.clock import Clock
from consumer.errors import MissingResourceError
from consumer.leases.model import Lease
from consumer.leases.repository import LeaseRepository
from consumer.lifecycle.messages import Discover, Discovered, Event
from consumer.lifecycle.retry import Verdict, is_throttle, operation, verdict
from consumer.logs import Repeated, log_event
from consumer.metrics.sink import MetricsSink
from consumer.retrieval.discovery import sync_leases
from consumer.retrieval.kinesis import KinesisApi, StreamMissingError

__all__ = ["Discovery", "count_throttle", "describe"]

logger = logging.getLogger(__name__)


def describe(exc: Exception) -> str:
    """A failure that may pass, for the event and the log; one that cannot (``retry.verdict``: a bug, a
    refusal, a missing table) is raised again instead, and ends the worker (``join()`` raises it): retrying it
    on schedule would only hide it while the fleet works around us."""
    if verdict(exc) is Verdict.SURFACE:
        raise exc
    return f"{'throttled' if is_throttle(exc) else 'transient'}: {exc!r}"


def count_throttle(metrics: MetricsSink, exc: Exception, *streams: str) -> None:
    """A throttled call is counted per operation (``Throttles.<Operation>``), as the shard loops count theirs,
    under each of ``streams``: a call of a stream's lease, or, for the worker's own calls that belong to no
    stream (its heartbeat, the reads of its item, the leader's scan and claim), every stream it consumes."""
    if is_throttle(exc):
        for stream in streams:
            metrics.add(f"Throttles.{operation(exc)}", 1, stream)


class Discovery:
    """Runs discoveries; keeps what its log lines need between them (which tracebacks were shown)."""

    def __init__(
        self,
        repo: LeaseRepository,
        kinesis: KinesisApi,
        metrics: MetricsSink,
        clock: Clock,
        initial_position: str = "TRIM_HORIZON",
    ) -> None:
        """``initial_position``: the fleet's (``retrieval.initial_position``); new leases follow it
        (``consumer.retrieval.discovery.new_lease``)."""
        self._initial_position = initial_position
        self._repo = repo
        self._kinesis = kinesis
        self._metrics = metrics
        self._clock = clock
        self._failures: dict[str, Repeated] = {}  # per stream: told at a bounded rate
        self._refused: set[tuple[str, str]] = set()  # (stream, error type): traceback shown
        self._broken: set[str] = set()  # error types that escaped a discovery: traceback shown

    def run(self, a: Discover) -> Event:
        """``_discover``'s answer, always: the leader counts the next discovery from this event, so one that
        raised instead (a bug that escaped its handlers) would be the last. It is logged with its traceback
        (once until a discovery goes through), counted in ``DiscoveryFailures`` and answered as a discovery
        that listed nothing: the next one comes at its interval."""
        counted: set[str] = set()
        try:
            found = self._discover(a, counted)
        except Exception as exc:
            first = type(exc).__name__ not in self._broken
            self._broken.add(type(exc).__name__)
            logger.error(
                "discovery failed unexpectedly",
                exc_info=exc if first else None,
                extra={"event": "discovery_bug", "streams": list(a.streams), "error": repr(exc)},
            )
            for stream in a.streams:
                if stream not in counted:
                    self._count_error(stream, counted)
            return Discovered(False)
        self._broken.clear()
        return found

    def _reread(self, key: str) -> Lease | None:
        """A lease as stored now (a restart that lost a race with the fleet is made again from it)."""
        return next(iter(self._repo.get_leases((key,))), None)

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
                now_ms = self._clock.wall_ms()
                done, rest = sync_leases(
                    self._kinesis,
                    self._repo,
                    stream,
                    a.leases,
                    left,
                    self._initial_position,
                    now_ms,
                    reread=self._reread,
                )
                changed, more, left = changed or bool(done), more or rest, left - done
                listed.add(stream)
                self._refused = {k for k in self._refused if k[0] != stream}
                if (told := self._failures.get(stream)) is not None:
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
                count_throttle(self._metrics, exc, stream)
                if verdict(exc) is Verdict.SURFACE:  # a bug or a refusal: loud every time; its traceback
                    # once until the stream lists again (one per discovery_interval would bury the log)
                    kind = (stream, type(exc).__name__)
                    first = kind not in self._refused
                    self._refused.add(kind)
                    logger.error(
                        "discovery refused",
                        exc_info=exc if first else None,
                        extra={"event": "discovery_refused", "stream": stream, "error": repr(exc)},
                    )
                    continue
                told = self._failures.setdefault(
                    stream, Repeated(logger, "discovery_failed", "discovery_recovered")
                )
                told.failed(self._clock.monotonic(), stream=stream, error=describe(exc))
        return Discovered(changed, more, frozenset(missing), frozenset(listed))
