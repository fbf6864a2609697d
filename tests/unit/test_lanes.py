"""The heartbeat lane on made-up time: it beats on its own schedule, coalesces the coordinator's requests,
retries fast while the window is open and, once it has closed, no faster than once per ``lapsed_every``
(so a worker whose requests land but whose answers are lost cannot keep its leases alive); the background
lane runs one call at a time and reports each event."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from consumer.clock import FakeClock
from consumer.errors import RefusedError, ThrottledError, UnreachableError, WorkerFencedError
from consumer.leases.liveness import OwnValidity
from consumer.lifecycle.lanes import BackgroundLane, HeartbeatLane, HeartbeatParams
from consumer.lifecycle.messages import Discovered, Event, HeartbeatResult, Result

from .helpers import wait_until

LOOK = 0.6  # a little more than the lane's longest sleep between looks at its schedule


class Repo:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls: list[tuple[float, int]] = []
        self.failing = False
        self.unsent = False  # a failure that provably reached nothing (connection refused, not made)
        self.fenced = False
        self.broken: Exception | None = None
        self.lock = threading.Lock()

    def heartbeat(
        self,
        worker_id: str,
        generation: int,
        lease_count: int,
        draining: bool,
        progress: object = None,
        gone: frozenset[str] = frozenset(),
    ) -> int:
        with self.lock:
            self.calls.append((self.clock.monotonic(), generation))
        if self.fenced:
            raise WorkerFencedError("generation moved")
        if self.failing:
            raise UnreachableError("cannot reach DynamoDB (heartbeat w on leases)", unsent=self.unsent)
        if self.broken is not None:
            raise self.broken
        return len(self.calls)

    def count(self) -> int:
        with self.lock:
            return len(self.calls)


def lane(clock: FakeClock, repo: Repo, events: list[Event]) -> tuple[HeartbeatLane, OwnValidity]:
    validity = OwnValidity(clock, 2.0)
    hb = HeartbeatLane("w", repo, validity, clock, 1.0, 0.2, events.append, lapsed_every=3.0)  # type: ignore[arg-type]
    hb.start()
    return hb, validity


def quiet(repo: Repo, calls: int) -> None:
    assert not threading.Event().wait(LOOK)  # give the lane a look or two
    assert repo.count() == calls


def test_the_lane_beats_on_its_own_and_coalesces_requests() -> None:
    clock, events = FakeClock(0.0), []
    repo = Repo(clock)
    hb, validity = lane(clock, repo, events)
    try:
        params = HeartbeatParams(0, 1, False)
        hb.request(params)
        wait_until(lambda: repo.count() == 1, what="the first beat")
        wait_until(lambda: validity.valid() and len(events) == 1)
        assert isinstance(events[0], HeartbeatResult) and events[0].result is Result.OK
        hb.request(HeartbeatParams(0, 2, False))  # a new lease count alone waits for the schedule
        quiet(repo, 1)
        clock.advance(1.0)
        wait_until(lambda: repo.count() == 2, what="the scheduled beat, with nobody asking")
        hb.request(HeartbeatParams(0, 2, True))  # draining: at once
        wait_until(lambda: repo.count() == 3, what="the draining beat")
    finally:
        hb.stop(1.0)


def test_failures_retry_fast_while_the_window_is_open_and_slowly_once_it_closed() -> None:
    clock, events = FakeClock(0.0), []
    repo = Repo(clock)
    hb, validity = lane(clock, repo, events)
    try:
        hb.request(HeartbeatParams(0, 1, False))
        wait_until(lambda: repo.count() == 1)
        repo.failing = True
        clock.advance(1.0)  # the scheduled beat fails; the window (2 s from 0) is still open
        wait_until(lambda: repo.count() == 2)
        clock.advance(0.2)
        wait_until(lambda: repo.count() == 3, what="a fast retry")
        clock.advance(0.8)  # t = 2.0: the window has closed
        wait_until(lambda: repo.count() == 4)
        assert not validity.valid()
        hb.request(HeartbeatParams(0, 1, False))  # the coordinator asking again changes nothing
        clock.advance(2.9)
        quiet(repo, 4)  # nothing for a lease duration and more: a taker can see the counter stand still
        repo.failing = False
        clock.advance(0.1)
        wait_until(lambda: repo.count() == 5, what="the slow retry")
        wait_until(validity.valid, what="the window open again")
    finally:
        hb.stop(1.0)


@pytest.mark.parametrize("unsent", ["refused", "throttled"])
def test_beats_that_provably_reached_nothing_are_retried_fast_also_once_the_window_closed(
    unsent: str,
) -> None:
    """A refused connection (or a throttle) cannot have moved the counter: after an outage a little longer
    than the window the worker resumes within a fast retry, not ``lapsed_every`` later."""
    clock, events = FakeClock(0.0), []
    repo = Repo(clock)
    if unsent == "throttled":
        repo.broken = ThrottledError("DynamoDB throttled (heartbeat w on leases)")
    hb, validity = lane(clock, repo, events)
    try:
        hb.request(HeartbeatParams(0, 1, False))
        wait_until(lambda: repo.count() == 1)
        repo.failing, repo.unsent = unsent == "refused", True
        clock.advance(2.0)  # t = 2.0: the scheduled beat fails as the window closes
        wait_until(lambda: repo.count() == 2)
        assert not validity.valid()
        clock.advance(0.2)
        wait_until(lambda: repo.count() == 3, what="a fast retry after the window closed")
        repo.failing, repo.broken = False, None
        clock.advance(0.2)
        wait_until(lambda: repo.count() == 4, what="the next fast retry, which lands")
        wait_until(validity.valid, what="the window open again")
    finally:
        hb.stop(1.0)


def test_a_fenced_lane_waits_for_the_reconciled_coordinator() -> None:
    clock, events = FakeClock(0.0), []
    repo = Repo(clock)
    hb, _ = lane(clock, repo, events)
    try:
        repo.fenced = True
        hb.request(HeartbeatParams(0, 1, False))
        wait_until(lambda: any(isinstance(e, HeartbeatResult) and e.fenced for e in events))
        clock.advance(5.0)
        quiet(repo, 1)  # no beat on its own after a fence
        repo.fenced = False
        hb.request(HeartbeatParams(1, 1, False))  # reconciled: the new generation
        wait_until(lambda: repo.count() == 2 and repo.calls[-1][1] == 1)
    finally:
        hb.stop(1.0)


@pytest.mark.parametrize(
    "broken",
    [
        RefusedError("DynamoDB refused (heartbeat w on leases): ValidationException: Item size too large"),
        KeyError("heartbeat"),  # a bug of ours
    ],
    ids=["refused", "bug"],
)
def test_a_beat_that_retrying_cannot_fix_stops_the_lane_and_is_raised_to_the_coordinator(
    broken: Exception,
) -> None:
    clock, events = FakeClock(0.0), []
    repo = Repo(clock)
    hb, validity = lane(clock, repo, events)
    try:
        repo.broken = broken
        hb.request(HeartbeatParams(0, 1, False))
        wait_until(lambda: any(isinstance(e, HeartbeatResult) for e in events), what="the failed beat")
        [failed] = events
        assert isinstance(failed, HeartbeatResult) and failed.result is Result.FAILED
        assert failed.error.startswith("fatal:")
        with pytest.raises(type(broken)) as raised:  # the coordinator's next request: the worker ends
            hb.request(HeartbeatParams(0, 1, False))
        assert raised.value is broken
        repo.broken = None
        clock.advance(5.0)
        quiet(repo, 1)  # never sent again, neither on its schedule nor asked
        assert not validity.valid()
    finally:
        hb.stop(1.0)


def test_the_background_lane_runs_calls_in_order_and_reports_their_events() -> None:
    events: list[Any] = []
    reported = threading.Event()
    bg = BackgroundLane("bg", lambda e: (events.append(e), reported.set()))
    gate = threading.Event()

    def slow() -> Event:
        gate.wait(5)
        return Discovered(True, False)

    bg.submit(slow)
    bg.submit(lambda: Discovered(False, True))
    assert not reported.wait(0.05)  # the first call holds the lane, not the caller
    gate.set()
    wait_until(lambda: events == [Discovered(True, False), Discovered(False, True)])
    bg.stop()
