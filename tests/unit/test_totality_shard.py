"""The shard machine walked over states and events enumerated from the code, not from a hand-written list.

The generated table (``shard_tables``) walks one representative state per phase and action in flight. This walk
takes every phase x stage x action in flight x mode x stop, and every variant of every event type (each verdict,
outcome and mode an event can carry), so that a new enum member or event field value is walked the day it is
added: ``transition`` answers every pair without raising, an answer that is not a transition changes nothing
and says why, and ``decide`` then settles on one action, one wait or the end (or refuses a stage that is not
one of the phase's, which the machine never reaches).
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from consumer.lifecycle import shard_decide, shard_machine
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
from consumer.lifecycle.shard_model import Mode, Phase, ShardState, Stage, Verdict, Work
from consumer.records import SHARD_END, Position
from tests.unit.helpers import quiet_loggers
from tests.unit.test_shard_machine import rules

NOW = 100.0
RULES = rules()
P1, P2 = Position("1", 0), Position("2", 0)

#: Every variant of each event type, built from the enums its fields take.
VARIANTS: dict[type, Callable[[], list[ShardEvent]]] = {
    Started: lambda: [Started(P1, m) for m in Mode],
    NotStarted: lambda: [NotStarted(o) for o in Outcome],
    SetupFailed: lambda: [SetupFailed(d, "e") for d in Decided],
    Fetched: lambda: [Fetched(2, P2), Fetched(0, nothing=True), Fetched(2, P2, shard_end=True)],
    FetchFailed: lambda: [FetchFailed(d, "e") for d in Decided],
    Delivered: lambda: [Delivered((0.1,))],
    DeliveryHalted: lambda: [DeliveryHalted(P2, P1), DeliveryHalted(P1, None)],
    DeliveryInterrupted: lambda: [DeliveryInterrupted()],
    WatermarkAdvanced: lambda: [WatermarkAdvanced(P1, 0), WatermarkAdvanced(None, 3)],
    CheckpointWritten: lambda: [CheckpointWritten(P2), CheckpointWritten(SHARD_END)],
    CheckpointFailed: lambda: [CheckpointFailed(P2, d) for d in Decided],
    WriterChanged: lambda: [WriterChanged(SHARD_END, None), WriterChanged(P1, P2)],
    ShutdownNotified: lambda: [ShutdownNotified()],
    ShardEndCalled: lambda: [ShardEndCalled()],
    WindowClosed: lambda: [WindowClosed(lost=lost) for lost in (False, True)],
    StopRequested: lambda: [StopRequested(r) for r in ShutdownReason],
    ValidityChanged: lambda: [ValidityChanged(False, NOW), ValidityChanged(True, NOW + 20)],
    Tick: lambda: [Tick()],
}


def _states() -> Iterator[ShardState]:
    base = ShardState(saved_at=NOW - 1, window_ends=NOW + 20, processed=P1, held=2, held_last=P2)
    for phase, stage, work, mode, stop, halting in itertools.product(
        Phase, Stage, [*Work, None], Mode, [None, *ShutdownReason], (False, True)
    ):
        yield replace(
            base,
            phase=phase,
            stage=stage,
            resume=Phase.READING,
            awaiting=work,
            mode=mode,
            stop=stop,
            halting=halting,
            pending=1 if mode is Mode.MANUAL else 0,
            deadline=NOW + 1,
            outcome=Outcome.STOPPED if phase is Phase.FINISHED else None,
        )


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """Every event everywhere: the machine's notes (backoffs, give-ups) are not news here."""
    with quiet_loggers(shard_machine, shard_decide):
        yield


def test_every_event_type_has_its_variants_here() -> None:
    assert set(VARIANTS) == set(typing.get_args(ShardEvent))


def test_every_pair_enumerated_from_the_code_is_answered_and_settles() -> None:
    events = [ev for make in VARIANTS.values() for ev in make()]
    pairs = 0
    for s in _states():
        for ev in events:
            pairs += 1
            step = transition(s, ev, NOW, RULES)
            if step.verdict is not Verdict.MOVED:
                assert step.why and step.state is s, (s.phase, s.stage, s.awaiting, ev)
                continue
            after = step.state
            if after.awaiting is not None:
                continue  # the shell reports that action's result first
            try:
                settled, actions = decide(after, NOW, RULES)
            except AssertionError as exc:  # a stage not of the phase's (never reached), or no settling
                assert "is not a stage of" in str(exc), (s.phase, s.stage, ev, exc)
                continue
            waits = [a for a in actions if isinstance(a, WaitUntil)]
            done = settled.phase is Phase.FINISHED or settled.awaiting is not None or len(waits) == 1
            assert done, (s.phase, s.stage, s.awaiting, ev, settled)
    assert pairs > 100_000  # every combination, not a sample
