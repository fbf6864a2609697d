"""Every dispatch on ``ShutdownReason`` is total: a reason none of them knows is refused (``assert_never``), never
taken silently by an ``else`` as if it were one of the two there are.

``test_totality_shard`` walks every state against every reason that exists; this walk adds one that does not
(a member made at run time, as a new reason added to the enum would be before its handlers are written) and
checks that every place that looks at a stop refuses it: the machine's table (``transition``), its decisions
(``decide``, over every phase x stage x mode), the shard's hands (``ShardWork.stopping``) and its shell
(``ShardConsumer.stop`` and ``news``). mypy finds the same missing case statically (``assert_never``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from consumer.config import RetrievalConfig
from consumer.lifecycle import shard_decide, shard_machine
from consumer.lifecycle.processor import BaseProcessor, ShutdownReason
from consumer.lifecycle.shard_decide import decide
from consumer.lifecycle.shard_machine import transition
from consumer.lifecycle.shard_messages import StopRequested
from consumer.lifecycle.shard_model import Mode, Phase, ShardState, Stage, Work
from consumer.records import Position
from consumer.retrieval.memory import InMemoryKinesis
from tests.unit.helpers import lone_shard_consumer, quiet_loggers
from tests.unit.test_shard_machine import rules

NOW = 100.0
RULES = rules()
UNREACHABLE = "Expected code to be unreachable"


def _unknown_reason() -> Any:
    """A ``ShutdownReason`` member that no handler was written for (what adding one to the enum makes)."""
    member = object.__new__(ShutdownReason)
    member._name_, member._value_ = "DRAINED", "drained"
    return member


NEW = _unknown_reason()


def _states(stop: Any) -> Iterator[ShardState]:
    """Every phase x stage x action in flight x mode, not finished, with ``stop`` noted."""
    base = ShardState(saved_at=NOW - 1, window_ends=NOW + 20, processed=Position("1", 0))
    for phase, stage, work, mode in itertools.product(Phase, Stage, [*Work, None], Mode):
        if phase is not Phase.FINISHED:
            yield replace(
                base, phase=phase, stage=stage, resume=Phase.READING, awaiting=work, mode=mode, stop=stop
            )


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with quiet_loggers(shard_machine, shard_decide):
        yield


def test_the_unknown_reason_is_none_of_the_known_ones() -> None:
    assert isinstance(NEW, ShutdownReason)
    assert all(r is not NEW and r != NEW for r in ShutdownReason)


def test_the_machines_table_refuses_a_stop_for_a_reason_it_has_no_case_for() -> None:
    walked = 0
    for s in [*_states(None), *_states(ShutdownReason.REQUESTED), *_states(ShutdownReason.LEASE_LOST)]:
        walked += 1
        with pytest.raises(AssertionError, match=UNREACHABLE):
            transition(s, StopRequested(NEW), NOW, RULES)
    assert walked > 1_000


def test_decide_refuses_a_noted_stop_it_has_no_case_for_in_every_state_it_decides_in() -> None:
    decided = 0
    for s in _states(NEW):
        if s.awaiting is not None:
            continue  # nothing is decided while an action is in flight
        decided += 1
        with pytest.raises(AssertionError, match=UNREACHABLE):
            decide(s, NOW, RULES)
    assert decided > 100


@pytest.mark.parametrize("site", ["ShardWork.stopping", "ShardConsumer.stop", "ShardConsumer.news"])
def test_the_shards_hands_and_shell_refuse_a_stop_they_have_no_case_for(site: str) -> None:
    consumer, _, _, _ = lone_shard_consumer(InMemoryKinesis(), BaseProcessor, RetrievalConfig())
    try:
        with pytest.raises(AssertionError, match=UNREACHABLE):
            if site == "ShardWork.stopping":
                consumer.work.stopping(NEW, cut=False)
            elif site == "ShardConsumer.stop":
                consumer.stop(NEW)
            else:  # noted by some other path: news() must not pass it on as one of the known stops
                consumer.work.reason = NEW
                consumer.news()
    finally:
        consumer.work.reason = None
        consumer.ended(None, RuntimeError("test over"))  # closes its own runner
