"""The shard's one retry policy on made-up time: failures give the shard up past the bound, throttles never."""

from __future__ import annotations

from botocore.exceptions import ClientError

from consumer.aws_errors import classify
from consumer.clock import FakeClock
from consumer.errors import ThrottledError, TransientError
from consumer.lifecycle.retry import RetryPolicy, is_throttle, operation


def _client_error(code: str, op: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": 400}}, op
    )


def _translated(code: str, op: str) -> TransientError:
    cause = _client_error(code, op)
    error = classify(cause, "dynamodb", "what")
    assert isinstance(error, TransientError)
    try:
        raise error from cause
    except TransientError as exc:
        return exc


def test_a_throttle_is_backed_off_for_ever_and_never_gives_the_shard_up() -> None:
    clock = FakeClock()
    policy = RetryPolicy(clock, 0.2, 1.0, give_up_after=10.0)
    throttle = _translated("ProvisionedThroughputExceededException", "GetRecords")
    assert is_throttle(throttle) and operation(throttle) == "GetRecords"
    delays = []
    for _ in range(200):  # 200 throttles in a row, well past the bound
        delay = policy.failed(throttle)
        assert delay is not None
        delays.append(delay)
        clock.advance(delay)
    assert clock.monotonic() - 1000.0 > 10.0
    assert min(delays) >= 0.1 and max(delays) <= 1.0  # capped, jittered exponential backoff: no stall
    assert len({round(d, 6) for d in delays}) > 100  # jitter
    assert policy.failing_for == 0.0


def test_an_outage_gives_the_shard_up_past_the_bound_and_throttles_in_between_do_not_reset_it() -> None:
    clock = FakeClock()
    policy = RetryPolicy(clock, 0.2, 1.0, give_up_after=10.0)
    outage = _translated("InternalFailure", "GetRecords")
    assert not is_throttle(outage)
    assert policy.failed(outage) is not None
    clock.advance(6.0)
    assert policy.failed(ThrottledError("x")) is not None
    clock.advance(4.5)
    assert policy.failed(outage) is None  # failing for 10.5 s: another worker may do better


def test_throttle_codes_of_every_service_are_throttles() -> None:
    for code in (
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "LimitExceededException",
        "SlowDown",
    ):
        assert isinstance(classify(_client_error(code, "Op"), "dynamodb", "w"), ThrottledError), code
    assert not isinstance(
        classify(_client_error("InternalServerError", "Op"), "dynamodb", "w"), ThrottledError
    )
    assert not isinstance(
        classify(_client_error("ValidationException", "Op"), "dynamodb", "w"), TransientError
    )
