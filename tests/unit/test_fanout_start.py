"""``register_with_retries`` on made-up time: a throttle is tried again for as long as it lasts, a failure that
may pass until the bound, a refusal or a missing stream not at all."""

from __future__ import annotations

import pytest

from consumer.errors import MissingResourceError, ThrottledError, UnreachableError
from consumer.lifecycle import retry
from consumer.lifecycle.fanout_start import register_with_retries

BOUNDS = retry.Backoff(base=0.5, cap=5.0, give_up_after=60.0)


class Api:
    """Fails with each of ``errors`` in turn, then registers."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def register_consumer(self, stream: str, name: str) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return f"arn:{stream}/consumer/{name}"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def _run(api: Api, clock: Clock) -> str:
    return register_with_retries(
        api, "s", "fleet", bounds=BOUNDS, now=clock.now, sleep=clock.sleep, jitter=lambda: 1.0
    )


def test_a_throttle_is_tried_again_for_as_long_as_it_lasts_with_a_capped_backoff() -> None:
    api, clock = Api(*[ThrottledError("LimitExceededException")] * 40), Clock()
    assert _run(api, clock) == "arn:s/consumer/fleet"
    assert api.calls == 41 and clock.t > BOUNDS.give_up_after  # past the bound: throttles never reach it
    assert clock.slept[:4] == [0.5, 1.0, 2.0, 4.0] and max(clock.slept) == 5.0


def test_a_failure_that_may_pass_is_tried_again_until_the_bound_then_raised() -> None:
    api, clock = Api(*[UnreachableError("kinesis: connection refused")] * 100), Clock()
    with pytest.raises(UnreachableError):
        _run(api, clock)
    assert BOUNDS.give_up_after <= clock.t < BOUNDS.give_up_after + BOUNDS.cap


def test_a_missing_stream_is_raised_at_once() -> None:
    api, clock = Api(MissingResourceError("no such stream")), Clock()
    with pytest.raises(MissingResourceError):
        _run(api, clock)
    assert api.calls == 1 and clock.slept == []
