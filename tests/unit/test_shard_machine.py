"""One shard's consumption, stepped one event at a time on made-up time: no threads, no clock, no sleeps.

Each test drives ``ShardMachine.step(now, events)`` the way the shell does (it reports every action's result
before anything else) and checks the actions it asks for. The walk of every (phase, event) pair is in
test_shard_machine_table.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from consumer.lifecycle.messages import Metric, Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.retry import Verdict as Decided
from consumer.lifecycle.shard_machine import ShardMachine
from consumer.lifecycle.shard_messages import (
    Checkpoint,
    CheckpointFailed,
    CheckpointWritten,
    CloseReader,
    Deliver,
    Delivered,
    DeliveryHalted,
    EndShard,
    Fetch,
    Fetched,
    FetchFailed,
    Finish,
    NotifyShutdown,
    NotStarted,
    Setup,
    SetupFailed,
    ShardAction,
    ShardEndCalled,
    ShardEvent,
    ShutdownNotified,
    Started,
    StopRequested,
    Tick,
    ValidityChanged,
    WaitUntil,
    WatermarkAdvanced,
    WindowClosed,
    WriterChanged,
)
from consumer.lifecycle.shard_model import Mode, Phase, Rules
from consumer.records import SHARD_END, Position

T0 = 100.0
OPEN = ValidityChanged(True, 1e9)  # a window that stays open


def rules(**overrides: Any) -> Rules:
    """Rules with short, round numbers (jitter 1.0: every backoff is its full value)."""
    base = Rules(
        "s",
        "shard-0",
        3,
        backoff_base=0.5,
        backoff_max=4.0,
        give_up_after=10.0,
        auto_interval=0.0,
        flush_interval=5.0,
        max_pending=100,
        final_timeout=2.0,
        window=20.0,
    )
    return replace(base, **overrides)


def p(n: int) -> Position:
    return Position(str(n), 0)


def work(actions: list[ShardAction]) -> list[ShardAction]:
    """The actions but the metrics."""
    return [a for a in actions if not isinstance(a, Metric)]


class Shell:
    """Steps a machine the way ShardConsumer does, on a clock that moves only when told to."""

    def __init__(self, mode: Mode = Mode.AUTO, start: Position | None = None, **overrides: Any) -> None:
        self.now = T0
        self.m = ShardMachine(rules(**overrides), self.now)
        assert work(self.m.step(self.now, [OPEN])) == [Setup()]
        self.first = self(Started(start, mode))

    def __call__(self, *events: ShardEvent, after: float = 0.0) -> list[ShardAction]:
        self.now += after
        return work(self.m.step(self.now, list(events)))


def test_a_round_fetches_delivers_and_checkpoints_what_was_delivered() -> None:
    shell = Shell()
    assert shell.first == [Fetch()]
    assert shell(Fetched(2, p(2))) == [Deliver()]
    assert shell(Delivered((0.1,))) == [Checkpoint(p(2))]
    assert shell(CheckpointWritten(p(2))) == [Fetch()]
    assert shell(Fetched(0)) == [Fetch()]  # an empty fetch: nothing to deliver, nothing new to save


def test_auto_checkpoints_wait_for_their_interval() -> None:
    shell = Shell(auto_interval=1.0)
    shell(Fetched(1, p(1)))
    assert shell(Delivered(), after=0.5) == [Fetch()]  # 0.5 s since the start: not due
    shell(Fetched(1, p(2)))
    assert shell(Delivered(), after=0.5) == [Checkpoint(p(2))]


def test_manual_checkpoints_follow_done_records_where_auto_follows_delivered_ones() -> None:
    """The same events in both modes: auto saves what was delivered; manual only what is done."""
    auto, manual = Shell(Mode.AUTO), Shell(Mode.MANUAL)
    for shell in (auto, manual):
        shell(Fetched(3, p(3)))
    assert auto(WatermarkAdvanced(None, 0), Delivered()) == [Checkpoint(p(3))]
    assert manual(WatermarkAdvanced(None, 3), Delivered()) == [Fetch()]  # delivered, none done: nothing
    assert manual(WatermarkAdvanced(p(1), 2), Fetched(0)) == [Checkpoint(p(1))]  # idle: what is done
    manual(CheckpointWritten(p(1)))
    assert manual.m.state.written == p(1)
    assert auto.m.state.written is None  # auto's write is still in flight


def test_manual_mode_stops_fetching_at_the_cap_and_saves_what_is_done_meanwhile() -> None:
    shell = Shell(Mode.MANUAL, max_pending=2)
    shell(Fetched(3, p(3)))
    assert shell(WatermarkAdvanced(None, 3), Delivered()) == [WaitUntil(T0 + 0.05)]  # 3 not done: no fetch
    assert shell(WatermarkAdvanced(p(1), 2), Tick(), after=0.05) == [Checkpoint(p(1))]  # still 2: paused
    assert shell(CheckpointWritten(p(1))) == [WaitUntil(shell.now + 0.05)]
    assert shell(WatermarkAdvanced(p(2), 1), Tick(), after=0.05) == [Fetch()]


def test_a_requested_stop_during_a_fetch_delivers_what_it_brings_then_drains() -> None:
    shell = Shell()
    # the fetch under way returns with records, and the stop that came during it
    assert shell(Fetched(2, p(2)), StopRequested(ShutdownReason.REQUESTED)) == [Deliver()]
    assert shell(Delivered()) == [Checkpoint(p(2))]
    assert shell(CheckpointWritten(p(2))) == [NotifyShutdown()]  # no new fetch
    assert shell(ShutdownNotified()) == [Finish(Outcome.STOPPED)]  # everything delivered is saved


def test_a_requested_stop_between_rounds_drains_with_a_final_checkpoint() -> None:
    shell = Shell(auto_interval=60.0)
    shell(Fetched(1, p(1)))
    assert shell(Delivered()) == [Fetch()]  # not due yet
    assert shell(Fetched(nothing=True, count=0), StopRequested(ShutdownReason.REQUESTED)) == [
        NotifyShutdown()
    ]
    assert shell(ShutdownNotified()) == [Checkpoint(p(1))]  # the final checkpoint, due or not
    assert shell(CheckpointWritten(p(1))) == [Finish(Outcome.STOPPED)]


def test_the_final_checkpoint_is_retried_until_its_own_deadline() -> None:
    shell = Shell(auto_interval=60.0, final_timeout=0.3)
    shell(Fetched(1, p(1)))
    shell(Delivered())
    shell(Fetched(0, nothing=True), StopRequested(ShutdownReason.REQUESTED))
    assert shell(ShutdownNotified()) == [Checkpoint(p(1))]
    assert shell(CheckpointFailed(p(1), Decided.RETRY)) == [WaitUntil(shell.now + 0.1)]
    assert shell(Tick(), after=0.1) == [Checkpoint(p(1))]
    assert shell(CheckpointFailed(p(1), Decided.BACK_OFF), after=0.25) == [Finish(Outcome.STOPPED)]


def test_a_drain_in_manual_mode_waits_for_done_records_up_to_the_timeout() -> None:
    shell = Shell(Mode.MANUAL, final_timeout=1.0)
    shell(Fetched(2, p(2)))
    shell(WatermarkAdvanced(None, 2), Delivered())
    assert shell(Fetched(0, nothing=True), StopRequested(ShutdownReason.REQUESTED)) == [NotifyShutdown()]
    assert shell(ShutdownNotified()) == [WaitUntil(shell.now + 0.05)]
    assert shell(WatermarkAdvanced(p(1), 1), Tick(), after=0.05) == [WaitUntil(shell.now + 0.05)]
    assert shell(WatermarkAdvanced(p(2), 0), Tick(), after=0.05) == [Checkpoint(p(2))]
    assert shell(CheckpointWritten(p(2))) == [Finish(Outcome.STOPPED)]


def test_a_lost_lease_stops_at_once_and_delivers_nothing_more() -> None:
    shell = Shell()
    assert shell(Fetched(2, p(2)), StopRequested(ShutdownReason.LEASE_LOST)) == [Finish(Outcome.LOST)]
    assert shell.m.finished
    assert shell(StopRequested(ShutdownReason.REQUESTED), Tick()) == []  # nothing after the end


def test_a_lost_lease_overrides_a_drain_under_way() -> None:
    shell = Shell()
    shell(Fetched(0, nothing=True), StopRequested(ShutdownReason.REQUESTED))
    assert shell(ShutdownNotified(), StopRequested(ShutdownReason.LEASE_LOST)) == [Finish(Outcome.LOST)]


def test_a_stop_before_the_setup_ends_stopped_without_a_drain() -> None:
    m = ShardMachine(rules(), T0)
    assert work(m.step(T0, [OPEN, StopRequested(ShutdownReason.REQUESTED)])) == [Finish(Outcome.STOPPED)]


def test_setup_that_finds_nothing_to_do_ends_with_what_it_found() -> None:
    for outcome in (Outcome.LOST, Outcome.SHARD_END):
        m = ShardMachine(rules(), T0)
        m.step(T0, [OPEN])
        assert work(m.step(T0, [NotStarted(outcome)])) == [Finish(outcome)]


def test_a_closed_window_suspends_holding_nothing_until_it_opens_again() -> None:
    shell = Shell()
    assert shell(Fetched(0, nothing=True), ValidityChanged(False, T0)) == [
        CloseReader(),
        WaitUntil(T0 + 0.05),
    ]
    assert shell.m.state.phase is Phase.SUSPENDED
    assert shell(Tick(), after=0.05) == [WaitUntil(shell.now + 0.05)]
    assert shell(ValidityChanged(True, shell.now + 20), Tick(), after=0.05) == [Fetch()]


def test_a_delivery_cut_by_a_closed_window_is_delivered_again_once_it_opens() -> None:
    shell = Shell()
    shell(Fetched(2, p(2)))
    assert shell(WindowClosed(lost=False), ValidityChanged(False, T0)) == [
        CloseReader(),
        WaitUntil(T0 + 0.05),
    ]
    assert shell(ValidityChanged(True, T0 + 20), Tick(), after=0.05) == [Deliver()]


def test_an_action_that_finds_the_lease_gone_ends_lost() -> None:
    shell = Shell()
    shell(Fetched(2, p(2)))
    assert shell(WindowClosed(lost=True)) == [Finish(Outcome.LOST)]


def test_a_batch_waits_for_room_in_the_window() -> None:
    shell = Shell()
    shell(Fetched(1, p(1)))
    shell(Delivered((3.0,)))  # a slow processor
    shell(CheckpointWritten(p(1)))
    assert shell(ValidityChanged(True, T0 + 2.0), Fetched(1, p(2))) == [WaitUntil(T0 + 0.02)]
    assert shell(ValidityChanged(True, T0 + 20.0), Tick(), after=0.02) == [Deliver()]


def test_failures_back_off_exponentially_and_give_up_past_the_bound() -> None:
    shell = Shell(give_up_after=8.0)
    waits = []
    for _ in range(5):
        (wait,) = shell(FetchFailed(Decided.RETRY, "boom"))
        assert isinstance(wait, WaitUntil)
        waits.append(round(wait.at - shell.now, 3))
        assert shell(Tick(), after=wait.at - shell.now) == [Fetch()]
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0]  # jitter 1.0: base * 2^n, capped at backoff_max
    assert shell(FetchFailed(Decided.RETRY, "boom")) == [Finish(Outcome.GAVE_UP)]  # 11.5 s >= 8 s


def test_a_good_round_resets_the_backoff() -> None:
    shell = Shell(give_up_after=3.0)
    (wait,) = shell(FetchFailed(Decided.RETRY))
    assert isinstance(wait, WaitUntil)
    shell(Tick(), after=2.5)
    assert shell(Fetched(0)) == [Fetch()]
    assert shell(FetchFailed(Decided.RETRY), after=2.0) == [WaitUntil(shell.now + 0.5)]  # counted afresh


def test_throttles_back_off_but_never_count_towards_giving_up() -> None:
    shell = Shell(give_up_after=3.0)
    for _ in range(10):
        (wait,) = shell(FetchFailed(Decided.BACK_OFF, "slow down"))
        assert isinstance(wait, WaitUntil) and wait.at - shell.now <= 4.0
        assert shell(Tick(), after=wait.at - shell.now) == [Fetch()]
    assert shell.now - T0 > 3.0 and not shell.m.finished


def test_a_refusal_or_a_bug_fails_at_once() -> None:
    shell = Shell()
    assert shell(FetchFailed(Decided.SURFACE, "AccessDenied")) == [
        Finish(Outcome.FAILED, detail="AccessDenied")
    ]
    m = ShardMachine(rules(), T0)
    m.step(T0, [OPEN])
    assert work(m.step(T0, [SetupFailed(Decided.SURFACE, "bad")])) == [Finish(Outcome.FAILED, detail="bad")]
    shell = Shell()
    shell(Fetched(1, p(1)))
    shell(Delivered())
    assert shell(CheckpointFailed(p(1), Decided.SURFACE)) == [Finish(Outcome.FAILED)]


def test_a_checkpoint_that_failed_transiently_is_sent_again_first() -> None:
    shell = Shell()
    shell(Fetched(1, p(1)))
    shell(Delivered())
    assert shell(CheckpointFailed(p(1), Decided.RETRY)) == [WaitUntil(shell.now + 0.5)]
    assert shell(Tick(), after=0.5) == [Checkpoint(p(1))]  # before any fetch
    assert shell(CheckpointWritten(p(1))) == [Fetch()]


def test_a_halted_delivery_saves_what_came_before_and_halts_at_the_record() -> None:
    shell = Shell()
    shell(Fetched(3, p(3)))
    assert shell(DeliveryHalted(at=p(2), before=p(1))) == [Checkpoint(p(1))]
    assert shell(CheckpointWritten(p(1))) == [Finish(Outcome.HALTED, p(2))]
    shell = Shell()
    shell(Fetched(3, p(3)))
    shell(DeliveryHalted(at=p(2), before=p(1)))
    assert shell(CheckpointFailed(p(1), Decided.RETRY)) == [Finish(Outcome.HALTED, p(2))]


def test_an_auto_checkpoint_waiting_for_its_interval_is_written_before_a_halt() -> None:
    shell = Shell(auto_interval=60.0)
    shell(Fetched(1, p(1)))
    assert shell(Delivered()) == [Fetch()]  # not due for a minute
    shell(Fetched(3, p(4)))
    assert shell(DeliveryHalted(at=p(3), before=p(2))) == [Checkpoint(p(2))]  # due: the shard ends here
    assert shell(CheckpointWritten(p(2))) == [Finish(Outcome.HALTED, p(3))]


def test_failing_rounds_write_the_auto_checkpoint_waiting_for_its_interval_before_the_next_try() -> None:
    shell = Shell(auto_interval=60.0, give_up_after=1.0)
    shell(Fetched(2, p(2)))
    assert shell(Delivered()) == [Fetch()]  # not due for a minute
    (wait,) = shell(FetchFailed(Decided.RETRY, "boom"))
    assert isinstance(wait, WaitUntil)
    assert shell(Tick(), after=wait.at - shell.now) == [Checkpoint(p(2))]  # before the next fetch
    assert shell(CheckpointWritten(p(2))) == [Fetch()]
    # past the bound the shard is given up, and its next owner starts after what was delivered
    assert shell(FetchFailed(Decided.RETRY, "boom"), after=1.0) == [Finish(Outcome.GAVE_UP)]
    assert shell.m.state.written == p(2)


def test_failing_rounds_in_manual_mode_write_what_is_done_before_the_next_try() -> None:
    shell = Shell(Mode.MANUAL, flush_interval=60.0)
    shell(Fetched(3, p(3)))
    assert shell(WatermarkAdvanced(None, 3), Delivered()) == [Fetch()]  # delivered, none done yet
    (wait,) = shell(WatermarkAdvanced(p(2), 1), FetchFailed(Decided.RETRY, "boom"))  # two done meanwhile
    assert isinstance(wait, WaitUntil)
    assert shell(Tick(), after=wait.at - shell.now) == [Checkpoint(p(2))]  # what is done, before the next try


def test_throttled_rounds_leave_the_auto_checkpoint_to_its_interval() -> None:
    shell = Shell(auto_interval=60.0)
    shell(Fetched(2, p(2)))
    shell(Delivered())
    (wait,) = shell(FetchFailed(Decided.BACK_OFF, "slow down"))
    assert isinstance(wait, WaitUntil)
    assert shell(Tick(), after=wait.at - shell.now) == [Fetch()]  # never given up for it: no early write
    assert shell(Fetched(0), after=60.0) == [Checkpoint(p(2))]  # the interval's


def test_the_shard_end_is_checkpointed_by_shard_ended_after_the_last_batch() -> None:
    shell = Shell()
    assert shell(Fetched(1, p(1), shard_end=True)) == [Deliver()]
    assert shell(Delivered()) == [Checkpoint(p(1))]
    assert shell(CheckpointWritten(p(1))) == [EndShard()]
    assert shell(WriterChanged(SHARD_END, None), ShardEndCalled()) == [Finish(Outcome.SHARD_END)]


def test_a_shard_end_not_checkpointed_halts_and_a_deferred_one_is_sent_again() -> None:
    shell = Shell()
    shell(Fetched(0, shard_end=True))
    assert shell(ShardEndCalled()) == [Finish(Outcome.HALTED, SHARD_END)]
    shell = Shell()
    assert shell(Fetched(0, shard_end=True)) == [EndShard()]
    assert shell(WriterChanged(None, SHARD_END), ShardEndCalled()) == [Checkpoint(SHARD_END)]
    assert shell(CheckpointWritten(SHARD_END)) == [Finish(Outcome.SHARD_END)]


def test_manual_mode_calls_shard_ended_only_once_every_record_is_done() -> None:
    shell = Shell(Mode.MANUAL)
    shell(Fetched(2, p(2), shard_end=True))
    assert shell(WatermarkAdvanced(None, 2), Delivered()) == [WaitUntil(shell.now + 0.05)]
    assert shell(WatermarkAdvanced(p(2), 0), Tick(), after=0.05) == [EndShard()]
