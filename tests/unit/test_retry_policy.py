"""The shard's one backoff (``retry.next_try``) on made-up time: failures give the shard up past the bound,
throttles never."""

from __future__ import annotations

import random

from botocore.exceptions import ClientError

from consumer.aws_errors import classify
from consumer.errors import ThrottledError, TransientError
from consumer.lifecycle.retry import Backoff, is_throttle, next_try, operation


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


BOUNDS = Backoff(base=0.2, cap=1.0, give_up_after=10.0)


def test_a_throttle_is_backed_off_for_ever_and_never_gives_the_shard_up() -> None:
    throttle = _translated("ProvisionedThroughputExceededException", "GetRecords")
    assert is_throttle(throttle) and operation(throttle) == "GetRecords"
    now, failures, since = 1000.0, 0, None
    delays = []
    for _ in range(200):  # 200 throttles in a row, well past the bound
        failures, since, delay = next_try(
            BOUNDS, failures, since, now, throttled=True, jitter=random.random()
        )
        assert delay is not None and since is None  # a throttle never starts the give-up count
        delays.append(delay)
        now += delay
    assert now - 1000.0 > 10.0
    assert min(delays) >= 0.1 and max(delays) <= 1.0  # capped, jittered exponential backoff: no stall
    assert len({round(d, 6) for d in delays}) > 100  # jitter


def test_an_outage_gives_the_shard_up_past_the_bound_and_throttles_in_between_do_not_reset_it() -> None:
    outage = _translated("InternalFailure", "GetRecords")
    assert not is_throttle(outage)
    failures, since, delay = next_try(BOUNDS, 0, None, 1000.0, throttled=False, jitter=0.5)
    assert delay is not None and since == 1000.0
    failures, since, delay = next_try(BOUNDS, failures, since, 1006.0, throttled=True, jitter=0.5)
    assert delay is not None and since == 1000.0  # a throttle in between keeps the count going
    failures, since, delay = next_try(BOUNDS, failures, since, 1010.5, throttled=False, jitter=0.5)
    assert delay is None and failures == 3  # failing for 10.5 s: another worker may do better


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
