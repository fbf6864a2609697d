"""The raw sink's PUT timeouts are typed settings: a wrong ``CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS`` or
``CONSUMER_RAW_READ_TIMEOUT_SECONDS`` stops ``python -m consumer run`` (a subprocess, as an operator runs it) with
one line naming the variable, exit 2, no traceback; the sink's own S3 client gets the values, one attempt per
PUT; and its decision on a failed write is ``retry.verdict``'s, with a missing bucket and denied access retried."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from consumer.aws_errors import classify
from consumer.config import RawSinkConfig, raw_sink_config_from_env
from consumer.errors import ConfigError
from consumer.sinks.raw_s3 import RawS3Sink, retried

from .helpers import raw_sink_env

ROOT = Path(__file__).resolve().parents[2]


def _run(**settings: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "consumer", "run"],
        check=False,
        cwd=ROOT,
        env=raw_sink_env(**settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("CONSUMER_RAW_READ_TIMEOUT_SECONDS", "0", "must be a number of seconds > 0, got 0.0"),
        ("CONSUMER_RAW_READ_TIMEOUT_SECONDS", "soon", "must be a number of seconds > 0, got 'soon'"),
        ("CONSUMER_RAW_READ_TIMEOUT_SECONDS", "120", "must be at most 60 seconds"),
        ("CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS", "nan", "must be a number of seconds > 0, got nan"),
    ],
)
def test_a_wrong_timeout_is_one_line_naming_the_variable(variable: str, value: str, says: str) -> None:
    out = _run(**{variable: value})
    assert out.returncode == 2, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {variable}: {says}"] or (
        len(errors) == 1 and errors[0].startswith(f"error: {variable}: ") and says in errors[0]
    ), out.stderr
    assert "Traceback" not in out.stderr


def test_the_timeouts_reach_the_sinks_own_client_with_one_attempt_per_put() -> None:
    settings = raw_sink_config_from_env(
        {
            "CONSUMER_RAW_BUCKET": "lake-raw",
            "CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS": "1.5",
            "CONSUMER_RAW_READ_TIMEOUT_SECONDS": "3",
        }
    )
    assert (settings.connect_timeout, settings.read_timeout) == (1.5, 3.0)
    assert (RawSinkConfig("b-1").connect_timeout, RawSinkConfig("b-1").read_timeout) == (2.0, 5.0)
    with pytest.raises(ConfigError, match=r"^raw_sink.read_timeout: "):
        RawSinkConfig("b-1", read_timeout=0)
    config = RawS3Sink(settings=settings)._client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (1.5, 3.0)
    assert config.retries["total_max_attempts"] == 1


def test_the_shared_client_follows_the_endpoint_the_process_points_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sinks share one S3 client per settings; a process pointed at another endpoint (or region) gets another,
    not the first one's (a test run starting emulators of its own, or an application switching accounts)."""
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    settings = RawSinkConfig("lake-raw")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4571")
    first = RawS3Sink(settings=settings)._client
    assert RawS3Sink(settings=settings)._client is first
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4572")
    second = RawS3Sink(settings=settings)._client
    assert (first.meta.endpoint_url, second.meta.endpoint_url) == (
        "http://127.0.0.1:4571",
        "http://127.0.0.1:4572",
    )


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


@pytest.mark.parametrize(
    ("failure", "tried_again"),
    [
        (_client_error("SlowDown", 503), True),
        (_client_error("InternalError", 500), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9/b/k"), True),
        (_client_error("NoSuchBucket", 404), True),  # the operator creates it: the shard resumes
        (_client_error("AccessDenied", 403), True),  # the operator fixes the policy: the shard resumes
        (_client_error("InvalidArgument", 400), False),  # refused as made: retrying cannot fix it
    ],
)
def test_one_verdict_decides_what_is_tried_again(failure: Exception, tried_again: bool) -> None:
    try:
        raise classify(failure, "s3", "PutObject") from failure  # as the sink raises it
    except Exception as exc:
        assert retried(exc) is tried_again


def test_a_bug_of_ours_is_not_tried_again() -> None:
    assert not retried(TypeError("can't concat str to bytes"))
    assert not retried(KeyError("epoch"))
