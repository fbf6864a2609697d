"""The raw sink's settings: a typed config read from ``CONSUMER_RAW_*`` (the old ``RAW_*`` names still work,
with a warning once), handed to the sink by the loader, and its bucket checked like any declared resource."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from consumer.config import RawSinkConfig, raw_sink_config_from_env, settings_from_env, worker_config_from_env
from consumer.errors import ConfigError
from consumer.loader import load_processor, settings_for
from consumer.preflight import processor_resources
from consumer.resources import Resource
from consumer.settings import raw_sink
from consumer.settings.raw_sink import DEPRECATED_RAW_VARIABLES, RAW_SINK_VARIABLES
from consumer.sinks.raw_s3 import RawS3Sink

SINK = "consumer.sinks.raw_s3:RawS3Sink"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A process environment without any raw sink variable but the bucket; deprecation warnings not yet given."""
    for name in (*RAW_SINK_VARIABLES.values(), *DEPRECATED_RAW_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CONSUMER_RAW_BUCKET", "lake-raw")
    monkeypatch.setattr(raw_sink, "_warned", set())
    return monkeypatch


def _deprecations(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "deprecated_setting"]


def test_settings_come_from_the_documented_variables(env: pytest.MonkeyPatch) -> None:
    defaults = RawS3Sink(client=object())
    assert defaults.settings == RawSinkConfig("lake-raw")
    assert (defaults.prefix, defaults.max_bytes, defaults.max_records, defaults.max_age) == (
        "raw",
        5 * 1024 * 1024,
        10_000,
        60.0,
    )
    env.setenv("CONSUMER_RAW_PREFIX", "landing/")
    env.setenv("CONSUMER_RAW_MAX_BYTES", "1024")
    env.setenv("CONSUMER_RAW_MAX_RECORDS", "10")
    env.setenv("CONSUMER_RAW_MAX_AGE_SECONDS", "2.5")
    sink = RawS3Sink(client=object())
    assert (sink.bucket, sink.prefix, sink.max_bytes, sink.max_records, sink.max_age) == (
        "lake-raw",
        "landing/",
        1024,
        10,
        2.5,
    )
    assert RawS3Sink(client=object(), max_records=7, prefix="").settings == RawSinkConfig(
        "lake-raw", "", 1024, 7, 2.5
    )


def test_the_old_names_still_set_the_sink_and_warn_once_each(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=raw_sink.__name__)
    env.setenv("RAW_MAX_BYTES", "1024")
    env.setenv("RAW_MAX_RECORDS", "10")
    env.setenv("RAW_MAX_AGE_SECONDS", "2.5")
    for _ in range(3):  # a sink per shard: the warning is given once per process
        sink = RawS3Sink(client=object())
        assert (sink.max_bytes, sink.max_records, sink.max_age) == (1024, 10, 2.5)
    warned = {(r.variable, r.use) for r in _deprecations(caplog)}  # type: ignore[attr-defined]
    assert warned == set(DEPRECATED_RAW_VARIABLES.items())
    assert len(_deprecations(caplog)) == 3


def test_the_new_name_wins_over_the_old_and_the_warning_says_the_old_is_ignored(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=raw_sink.__name__)
    config = raw_sink_config_from_env(
        {"CONSUMER_RAW_BUCKET": "b-1", "CONSUMER_RAW_MAX_RECORDS": "5", "RAW_MAX_RECORDS": "9"}
    )
    assert config.max_records == 5
    [warning] = _deprecations(caplog)
    assert "RAW_MAX_RECORDS is ignored" in warning.hint  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("CONSUMER_RAW_BUCKET", "", "needs a bucket"),
        ("CONSUMER_RAW_BUCKET", "s3://lake-raw/raw", "bucket name only"),
        ("CONSUMER_RAW_BUCKET", "Lake_Raw", "not an S3 bucket name"),
        ("CONSUMER_RAW_MAX_RECORDS", "lots", "'lots'"),
        ("CONSUMER_RAW_MAX_RECORDS", "0", "> 0"),
        ("CONSUMER_RAW_MAX_BYTES", "-5", "> 0"),
        ("CONSUMER_RAW_MAX_BYTES", "5MB", "'5MB'"),
        ("CONSUMER_RAW_MAX_AGE_SECONDS", "soon", "'soon'"),
        ("CONSUMER_RAW_MAX_AGE_SECONDS", "nan", "> 0"),
        ("CONSUMER_RAW_MAX_AGE_SECONDS", "0", "> 0"),
        ("RAW_MAX_RECORDS", "lots", "'lots'"),  # an old name: the error names the variable that was set
        ("RAW_MAX_AGE_SECONDS", "0", "> 0"),
    ],
)
def test_bad_settings_fail_at_construction_naming_the_variable(
    env: pytest.MonkeyPatch, variable: str, value: str, words: str
) -> None:
    env.setenv(variable, value)
    with pytest.raises(ConfigError) as err:
        RawS3Sink(client=object())
    assert err.value.field == variable
    assert str(err.value).startswith(f"{variable}: ") and words in str(err.value)


def test_the_bucket_error_names_the_prefix_variable_when_read_from_the_environment() -> None:
    with pytest.raises(ConfigError, match="goes in CONSUMER_RAW_PREFIX"):
        raw_sink_config_from_env({"CONSUMER_RAW_BUCKET": "s3://lake/raw"})
    with pytest.raises(ConfigError, match=r"^raw_sink\.bucket: .* goes in raw_sink\.prefix"):
        RawSinkConfig("s3://lake/raw")


def test_explicit_arguments_are_checked_too_naming_the_field(env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"^raw_sink\.max_records: must be a whole number > 0"):
        RawS3Sink(client=object(), max_records=0)
    with pytest.raises(ConfigError, match=r"^raw_sink\.max_age: .*> 0"):
        RawS3Sink(client=object(), max_age=float("inf"))
    with pytest.raises(ConfigError, match=r"^raw_sink\.max_bytes"):
        RawS3Sink(client=object(), settings=RawSinkConfig("b-1"), max_bytes=-1)


def test_the_loader_hands_the_sink_its_settings_read_from_the_workers_environment(
    env: pytest.MonkeyPatch,
) -> None:
    env.delenv("CONSUMER_RAW_BUCKET")  # the process environment has none: only the given mapping does
    given = {"CONSUMER_RAW_BUCKET": "given-bucket", "CONSUMER_RAW_MAX_RECORDS": "3"}
    sink = load_processor(SINK, given)()
    assert isinstance(sink, RawS3Sink)
    assert sink.settings == RawSinkConfig("given-bucket", max_records=3)
    with pytest.raises(ConfigError, match=r"^CONSUMER_RAW_BUCKET: the raw sink needs a bucket name"):
        RawS3Sink(client=object())  # built bare, it reads the process environment (through the same config)
    with pytest.raises(ConfigError, match=r"^CONSUMER_RAW_MAX_RECORDS: must be a whole number > 0, got 'x'"):
        load_processor(SINK, {**given, "CONSUMER_RAW_MAX_RECORDS": "x"})  # at load, not at a shard's start


def test_a_bad_sink_setting_fails_the_worker_config_naming_the_variable() -> None:
    env = {
        "CONSUMER_APPLICATION": "app",
        "CONSUMER_LEASE_TABLE": "leases",
        "CONSUMER_CHECKPOINT_TABLE": "checkpoints",
        "CONSUMER_STREAMS": "orders",
        "CONSUMER_PROCESSOR": SINK,
        "CONSUMER_RAW_BUCKET": "lake-raw",
        "CONSUMER_RAW_MAX_AGE_SECONDS": "soon",
    }
    with pytest.raises(ConfigError, match=r"^CONSUMER_RAW_MAX_AGE_SECONDS: .*'soon'"):
        worker_config_from_env(env, load_processor)
    config = worker_config_from_env({**env, "CONSUMER_RAW_MAX_AGE_SECONDS": "4"}, load_processor)
    sink = config.streams[0].processor_factory()
    assert isinstance(sink, RawS3Sink) and sink.settings == RawSinkConfig("lake-raw", max_age=4.0)


class _Subclass(RawS3Sink):
    def __init__(self, table: str = "t", **raw: Any) -> None:
        super().__init__(**raw)
        self.table = table


class _Bare(RawS3Sink):
    def __init__(self) -> None:  # takes no settings: it is constructed bare and reads the environment
        super().__init__(client=object())


def test_a_subclass_gets_the_settings_when_its_constructor_takes_them_and_is_built_bare_otherwise() -> None:
    given = {"CONSUMER_RAW_BUCKET": "given-bucket"}
    assert settings_for(_Subclass, given) == RawSinkConfig("given-bucket")
    assert settings_for(_Bare, given) is None
    assert settings_for(object, given) is None
    assert settings_from_env(RawSinkConfig, given) == RawSinkConfig("given-bucket")
    with pytest.raises(TypeError, match="not a settings type"):
        settings_from_env(Resource, given)


def test_the_bucket_is_a_declared_resource_checked_like_any_other() -> None:
    sink = RawS3Sink(client=object(), settings=RawSinkConfig("lake-raw"))
    assert processor_resources(sink) == [Resource("s3_bucket", "lake-raw", "CONSUMER_RAW_BUCKET")]
    assert processor_resources(object()) == []
