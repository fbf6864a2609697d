"""No error in the shard runner's own work vanishes: each is logged with its traceback, the shard it belongs to
ends (the coordinator hears of it once), and the other shards go on.

The errors come from where they would: a lane pool that refuses the job that ends a shard (it could not start
a thread: ``RuntimeError: can't start new thread``), alone and while the runner was ending a shard on a bug of
ours (an error raised by the error path itself); on made-up time, with the pools of ``test_shard_runner``.
"""

from __future__ import annotations

import logging
import sys

import pytest

from consumer.clock import SystemClock
from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.pools import GrowingPool, Job
from consumer.lifecycle.processor import InitializationInput, ShutdownReason
from consumer.lifecycle.shard_messages import ShardEvent
from tests.unit.helpers import Journal, RecordingProcessor, wait_until
from tests.unit.test_shard_runner import HeldPool, Rig


class RefusingPool(HeldPool):
    """A held pool that refuses the next ``refusals`` jobs, as a pool that cannot start a thread does."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals = 0

    def submit(self, job: Job) -> None:
        if self.refusals:
            self.refusals -= 1
            raise RuntimeError("can't start new thread")
        super().submit(job)


def _rig(shards: int) -> tuple[Rig, RefusingPool]:
    journal = Journal()
    lanes = RefusingPool()
    rig = Rig(shards, lambda: RecordingProcessor(journal, "w1"), lanes=lanes)
    return rig, lanes


def _logged(caplog: pytest.LogCaptureFixture, kind: type[BaseException]) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None and isinstance(r.exc_info[1], kind)]


def test_a_shard_end_the_lane_pool_refuses_is_logged_and_handed_over_again_until_the_coordinator_hears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig, lanes = _rig(1)
    rig.add()
    rig.settle()
    lanes.refusals = 1
    with caplog.at_level(logging.INFO):
        rig.consumers[0].stop(ShutdownReason.LEASE_LOST)
        rig.runner.run_once()  # the machine finishes LOST; the job that reports it is refused
        assert [r.getMessage() for r in _logged(caplog, RuntimeError)] == [
            "shard end not handed to the lane pool: asked again"
        ], "a refused end must be logged, with its traceback"
        rig.settle()
    assert rig.outcomes() == [Outcome.LOST], "the coordinator never heard of the shard"
    assert rig.consumers[0].finished and rig.runner.shards == 0


def test_an_error_while_ending_a_shard_on_a_bug_is_logged_and_the_other_shards_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig, lanes = _rig(2)
    broken, other = rig.consumers
    rig.add()
    rig.runner.run_once()
    assert lanes.run() == 2  # both setups: their results wait in the inbox
    bug = KeyError("watermark")

    def news() -> list[ShardEvent]:
        raise bug

    broken.news = news  # type: ignore[method-assign] # a bug of ours in what the machine reads
    lanes.refusals = 1  # and ending the shard on it fails too
    with caplog.at_level(logging.INFO):
        rig.runner.run_once()  # must not raise: the other shard's setup result is in the same batch
        [shown] = _logged(caplog, RuntimeError)
        assert shown.exc_info is not None
        assert getattr(shown.exc_info[1], "__context__", None) is bug, "the bug it was ending on, chained"
        assert len(rig.fetches.jobs) == 1, "the other shard was not stepped"  # type: ignore[attr-defined]
        rig.settle()
    assert rig.outcomes() == [Outcome.FAILED]  # the broken shard, once; the other runs on
    assert broken.finished and not other.finished
    assert [r for r in caplog.records if r.getMessage() == "shard loop failed" and r.exc_info]
    other.stop(ShutdownReason.REQUESTED)
    rig.clock.advance(1.0)  # type: ignore[attr-defined] # its last poll's pacing slot: the poll is let finish
    rig.settle()
    assert rig.outcomes() == [Outcome.STOPPED]


class _ExitingTimer(RecordingProcessor):
    """A processor whose own timer (``InitializationInput.timers``) calls ``sys.exit()``: a ``BaseException``
    raised on the shard's lane, outside any processor call."""

    def initialize(self, data: InitializationInput) -> None:
        super().initialize(data)
        assert data.timers is not None
        data.timers.call_later(0.0, lambda: sys.exit(3))


def test_a_processor_timer_that_raises_system_exit_is_logged_and_its_shard_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    journal = Journal()
    lanes, fetches = GrowingPool("lanes", 2), GrowingPool("fetches", 1)
    rig = Rig(1, lambda: _ExitingTimer(journal, "w1"), clock=SystemClock(), fetches=fetches, lanes=lanes)
    try:
        with caplog.at_level(logging.INFO):
            rig.add()
            wait_until(lambda: bool(_logged(caplog, SystemExit)), what="the timer's SystemExit logged")
            rig.kinesis.put("s", rig.shards[0], b"after")
            wait_until(lambda: bool(journal.sequences()), what="a record delivered after the timer")
            rig.consumers[0].stop(ShutdownReason.REQUESTED)
            finished = rig.finished.get(timeout=10)  # the coordinator hears of the shard, once
        assert finished.outcome is Outcome.STOPPED
        assert [r.getMessage() for r in _logged(caplog, SystemExit)] == ["processor timer failed"]
    finally:
        rig.runner.close()
