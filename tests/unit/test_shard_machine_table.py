"""The shard machine is total: every (phase, event) pair is walked and answered, and every answer settles.

mypy checks that ``transition`` names every event type and ``decide`` every phase and stage; this walk checks
that every pair gives a transition, an explicit ignored or an explicit invalid (with its reason, changing
nothing), that an action's result is taken only while that action is in flight, and that whatever follows
settles on one action, one wait or the end.
"""

from __future__ import annotations

import typing
from dataclasses import replace

from consumer.lifecycle import shard_tables
from consumer.lifecycle.messages import Outcome
from consumer.lifecycle.processor import ShutdownReason
from consumer.lifecycle.retry import Verdict as Decided
from consumer.lifecycle.shard_decide import decide
from consumer.lifecycle.shard_machine import transition
from consumer.lifecycle.shard_messages import (
    CheckpointFailed,
    CheckpointWritten,
    Delivered,
    DeliveryHalted,
    DeliveryInterrupted,
    Fetched,
    FetchFailed,
    NotStarted,
    SetupFailed,
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
from consumer.lifecycle.shard_model import Mode, Phase, ShardState, Verdict, Work
from consumer.records import SHARD_END, Position
from tests.unit.test_shard_machine import rules

NOW = shard_tables.NOW
RULES = rules()
P1, P2 = Position("1", 0), Position("2", 0)
# A representative state of every phase and of every action in flight: the same ones the generated table in
# docs/protocol.md walks.
STATES: list[ShardState] = shard_tables.STATES
EVENTS: list[ShardEvent] = [
    Started(P1, Mode.AUTO),
    NotStarted(Outcome.LOST),
    SetupFailed(Decided.RETRY, "timeout"),
    SetupFailed(Decided.SURFACE, "refused"),
    Fetched(2, P2),
    Fetched(0, nothing=True),
    FetchFailed(Decided.BACK_OFF, "throttled"),
    Delivered((0.1,)),
    DeliveryHalted(P2, P1),
    DeliveryInterrupted(),
    WatermarkAdvanced(P1, 1),
    CheckpointWritten(P2),
    CheckpointFailed(P2, Decided.RETRY),
    CheckpointFailed(P2, Decided.SURFACE),
    WriterChanged(SHARD_END, None),
    ShutdownNotified(),
    ShardEndCalled(),
    WindowClosed(lost=False),
    WindowClosed(lost=True),
    StopRequested(ShutdownReason.REQUESTED),
    StopRequested(ShutdownReason.LEASE_LOST),
    ValidityChanged(False, NOW),
    Tick(),
]
RESULT_OF: dict[type, Work] = {
    Started: Work.SETUP,
    NotStarted: Work.SETUP,
    SetupFailed: Work.SETUP,
    Fetched: Work.FETCH,
    FetchFailed: Work.FETCH,
    Delivered: Work.DELIVER,
    DeliveryHalted: Work.DELIVER,
    DeliveryInterrupted: Work.DELIVER,
    CheckpointWritten: Work.CHECKPOINT,
    CheckpointFailed: Work.CHECKPOINT,
    ShutdownNotified: Work.NOTIFY,
    ShardEndCalled: Work.END,
}
ROWS = [(s, ev, transition(s, ev, NOW, RULES)) for s in STATES for ev in EVENTS]


def test_the_walk_reaches_every_phase_and_every_event_type() -> None:
    assert {s.phase for s in STATES} == set(Phase)
    assert {type(ev) for ev in EVENTS} == set(typing.get_args(ShardEvent))
    assert {s.awaiting for s in STATES} == {*Work, None}


def test_every_pair_is_answered_and_what_is_not_a_transition_says_why_and_changes_nothing() -> None:
    for s, ev, step in ROWS:
        assert isinstance(step.verdict, Verdict), (s.phase, ev)
        if step.verdict is not Verdict.MOVED:
            assert step.why, f"{s.phase} / {ev}: an ignored or invalid answer must say why"
            assert step.state is s, (s.phase, ev)


def test_a_result_is_taken_only_while_its_action_is_in_flight() -> None:
    for s, ev, step in ROWS:
        if s.phase is Phase.FINISHED:
            assert step.verdict is Verdict.IGNORED, ev
            continue
        work = RESULT_OF.get(type(ev))
        if work is not None:
            assert (step.verdict is Verdict.INVALID) == (s.awaiting is not work), (s.phase, s.awaiting, ev)
        if isinstance(ev, WindowClosed):
            assert (step.verdict is Verdict.INVALID) == (s.awaiting is None), (s.phase, ev)
        if step.verdict is Verdict.MOVED and work is not None:
            assert step.state.awaiting is None, (s.phase, ev)


def test_whatever_follows_settles_on_one_action_a_wait_or_the_end() -> None:
    for s, ev, step in ROWS:
        later = transition(step.state, ValidityChanged(True, NOW + 20), NOW, RULES).state
        for state in (step.state, later):
            if state.awaiting is not None:
                continue  # the shell reports that action's result first
            after, actions = decide(state, NOW, RULES)
            waits = [a for a in actions if isinstance(a, WaitUntil)]
            settled = after.phase is Phase.FINISHED or after.awaiting is not None or len(waits) == 1
            assert settled, (s.phase, ev, after)
            assert not (after.awaiting is not None and waits), (s.phase, ev)


def test_a_lost_lease_always_ends_the_machine_once_its_action_in_flight_reports() -> None:
    for s in STATES:
        step = transition(replace(s, awaiting=None), StopRequested(ShutdownReason.LEASE_LOST), NOW, RULES)
        after, _ = decide(step.state, NOW, RULES)
        assert after.phase is Phase.FINISHED
        assert after.outcome is (Outcome.LOST if s.phase is not Phase.FINISHED else Outcome.STOPPED)
