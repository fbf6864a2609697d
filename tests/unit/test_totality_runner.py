"""The shard runner's own dispatches are total too: a timer of a kind it does not handle, or a checkpoint policy
the shell cannot name a mode for, is a bug that raises (and so ends its shard FAILED through the runner's
boundary), never a case that silently does nothing or runs as auto mode."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from consumer.checkpoint import policy
from consumer.clock import FakeClock
from consumer.lifecycle.pools import Job
from consumer.lifecycle.runner_slot import Slot, Timer, TimerKind
from consumer.lifecycle.shard_model import Mode
from consumer.lifecycle.shard_runner import ShardRunner
from consumer.lifecycle.shard_work import _mode


class _Unused:
    def submit(self, job: Job) -> None:
        raise AssertionError("no job is expected")

    def relieve(self) -> None:
        return None

    def close(self) -> None:
        return None


def test_a_timer_of_a_kind_the_runner_does_not_handle_raises_instead_of_being_dropped() -> None:
    runner = ShardRunner(FakeClock(), _Unused(), _Unused(), threaded=False)
    host: Any = type("H", (), {"key": "k"})()
    runner._slots["k"] = Slot(host)
    assert set(typing.get_args(TimerKind)) == {"wait", "pace", "grace", "later"}
    bogus: Any = "bogus"
    with pytest.raises(AssertionError):
        runner._fire(Timer(0.0, 1, "k", bogus))


def test_a_checkpoint_policy_the_shell_cannot_name_a_mode_for_raises_instead_of_running_as_auto() -> None:
    assert _mode(policy.ExplicitCheckpoints()) is Mode.EXPLICIT
    unknown: Any = object()  # say, a fourth policy added without a mode for the machine
    with pytest.raises(AssertionError):
        _mode(unknown)
