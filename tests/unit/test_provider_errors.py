"""The one classifier of provider errors: each botocore failure becomes our error with the ``retriable`` that
decides retry or give-up; a bug of ours goes through every translator untouched."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ChecksumError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)

from consumer.aws_errors import THROTTLE_CODES, aws_call, classify
from consumer.dynamo import translate_errors
from consumer.errors import (
    ConfigError,
    LeaseConflictError,
    MissingResourceError,
    RefusedError,
    ThrottledError,
    TransientError,
    UnreachableError,
    is_retriable,
)


def _client_error(code: str, status: int = 400, **extra: Any) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError({**response, **extra}, "Op")


def _cancelled(*reasons: str) -> ClientError:
    return _client_error("TransactionCanceledException", CancellationReasons=[{"Code": r} for r in reasons])


@pytest.mark.parametrize(
    ("exc", "kind", "retriable"),
    [
        *[(_client_error(code), ThrottledError, True) for code in sorted(THROTTLE_CODES)],
        (_client_error("InternalServerError", 500), TransientError, True),
        (_client_error("SomethingNew", 503), TransientError, True),
        (_client_error("TransactionInProgressException"), TransientError, True),
        (_client_error("RequestTimeoutException"), TransientError, True),
        (_client_error("TransactionConflictException"), TransientError, True),
        (IncompleteReadError(actual_bytes=3, expected_bytes=9), TransientError, True),
        (ChecksumError(checksum_type="crc32", expected_checksum=1, actual_checksum=2), TransientError, True),
        (_cancelled("None", "ThrottlingError"), ThrottledError, True),
        (_cancelled("TransactionConflict", "None"), TransientError, True),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), UnreachableError, True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), UnreachableError, True),
        (ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"), UnreachableError, True),
        (ConnectionResetError(), UnreachableError, True),
        (_client_error("ResourceNotFoundException"), MissingResourceError, False),
        (_client_error("ExpiredTokenException"), ConfigError, False),
        (NoCredentialsError(), ConfigError, False),
        (_client_error("AccessDeniedException"), RefusedError, False),
        (_client_error("ValidationException"), RefusedError, False),
        (_cancelled("ValidationError"), RefusedError, False),
        (ParamValidationError(report="Invalid type for parameter Limit"), RefusedError, False),
    ],
    ids=lambda v: getattr(v, "__name__", None) or type(v).__name__,
)
def test_every_provider_failure_is_ours_and_says_whether_retrying_helps(
    exc: Exception, kind: type[Exception], retriable: bool
) -> None:
    error = classify(exc, "dynamodb", "take s/sh on leases")
    assert type(error) is kind
    assert is_retriable(error) is retriable
    assert error.retriable is retriable


def test_a_throttle_never_is_an_outage_and_an_outage_never_a_throttle() -> None:
    assert not isinstance(classify(_client_error("InternalServerError", 500)), ThrottledError)
    assert not isinstance(classify(_client_error("ValidationException")), TransientError)


def test_kinesis_resource_in_use_is_a_throttle_there_only() -> None:
    in_use = _client_error("ResourceInUseException")
    assert isinstance(classify(in_use, "kinesis", "s1"), ThrottledError)
    assert isinstance(classify(in_use, "dynamodb", "create table"), RefusedError)


def test_messages_name_the_call_and_the_setting() -> None:
    refused = classify(_client_error("ValidationException"), "dynamodb", "heartbeat w1 on leases")
    assert str(refused) == "DynamoDB refused (heartbeat w1 on leases): ValidationException: m"
    missing = classify(_client_error("ResourceNotFoundException"), "kinesis", "describe", "--stream")
    assert "--stream" in str(missing) and "not found" in str(missing)
    unreachable = classify(EndpointConnectionError(endpoint_url="http://h:1"), "dynamodb")
    assert "cannot reach DynamoDB at http://h:1" in str(unreachable)
    assert "AWS_ENDPOINT_URL_DYNAMODB" in str(unreachable)


def test_the_dynamodb_translator_reads_conflicts_and_leaves_bugs_alone() -> None:
    with pytest.raises(LeaseConflictError), translate_errors("leases", "take"):
        raise _cancelled("None", "ConditionalCheckFailed")
    with pytest.raises(ThrottledError) as throttled, translate_errors("leases", "take"):
        raise _cancelled("ThrottlingError")
    assert isinstance(throttled.value.__cause__, ClientError)
    with pytest.raises(RefusedError), translate_errors("leases", "heartbeat"):
        raise _client_error("ValidationException")
    with pytest.raises(MissingResourceError, match="create-tables"), translate_errors("leases", "scan"):
        raise _client_error("ResourceNotFoundException")
    with pytest.raises(KeyError), translate_errors("leases", "scan"):  # a bug: not a provider's failure
        raise KeyError("epoch")


def test_one_shot_calls_use_the_same_classifier() -> None:
    with pytest.raises(UnreachableError) as unreachable, aws_call("s3", "bucket 'b'", "CONSUMER_RAW_BUCKET"):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    assert isinstance(unreachable.value, TransientError)  # the worker retries it; the CLI exits 4
    with pytest.raises(TypeError), aws_call("s3", "bucket 'b'"):
        raise TypeError("a bug")


def test_a_profile_that_does_not_exist_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.exceptions import ProfileNotFound

    monkeypatch.setenv("AWS_PROFILE", "nosuch")
    error = classify(ProfileNotFound(profile="nosuch"))
    assert isinstance(error, ConfigError) and error.field == "AWS_PROFILE"
    assert str(error).startswith("AWS_PROFILE: no profile 'nosuch'")
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_DEFAULT_PROFILE", "nosuch")
    assert classify(ProfileNotFound(profile="nosuch")).field == "AWS_DEFAULT_PROFILE"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "env", "setting"),
    [
        ({"endpoint_url": "notaurl"}, {}, "endpoint_url"),
        ({"endpoint_url": "notaurl", "endpoint_setting": "endpoints['kinesis']"}, {}, "endpoints['kinesis']"),
        ({}, {"AWS_ENDPOINT_URL": "notaurl"}, "AWS_ENDPOINT_URL"),
        (
            {},
            {"AWS_ENDPOINT_URL_KINESIS": "http://[::1", "AWS_ENDPOINT_URL": "http://ok:1"},
            "AWS_ENDPOINT_URL_KINESIS",
        ),
        ({}, {"AWS_ENDPOINT_URL": "localhost:4566"}, "AWS_ENDPOINT_URL"),
    ],
)
def test_an_endpoint_that_is_not_a_url_names_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, str], env: dict[str, str], setting: str
) -> None:
    """Not botocore's bare ``ValueError`` (a traceback at the command line): a ConfigError naming the variable
    the endpoint came from, or the argument."""
    from consumer.aws import make_client

    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_KINESIS", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        make_client("kinesis", region="us-east-1", **kwargs)
    assert info.value.field == setting and "not a URL" in str(info.value)


def test_an_endpoint_that_is_a_url_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from consumer.aws import make_client

    monkeypatch.setenv("AWS_ENDPOINT_URL_KINESIS", "http://[::1]:4567")
    assert make_client("kinesis", region="us-east-1").meta.endpoint_url == "http://[::1]:4567"
    assert make_client("s3", region="us-east-1", endpoint_url="http://127.0.0.1:1").meta.endpoint_url == (
        "http://127.0.0.1:1"
    )
