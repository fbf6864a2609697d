from __future__ import annotations

import pytest

from consumer.config import (
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    WorkerConfig,
    default_text,
    parse_timestamp,
    polling_rate_warning,
    worker_config_from_env,
)
from consumer.env_vars import ENV_VARS
from consumer.errors import ConfigError, ProcessorLoadError
from consumer.examples.logging_processor import LoggingProcessor
from consumer.loader import load_processor


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: LeaseConfig(lease_duration=-1), "lease.lease_duration"),
        (lambda: LeaseConfig(lease_duration=float("inf")), "lease.lease_duration"),
        (lambda: LeaseConfig(lease_duration=10, safety_margin=10), "lease.safety_margin"),
        (lambda: LeaseConfig(heartbeat_interval=9), "lease.heartbeat_interval"),
        (lambda: LeaseConfig(scan_interval=20), "lease.scan_interval"),
        (lambda: RetrievalConfig(max_records=0), "retrieval.max_records"),
        (lambda: RetrievalConfig(initial_position="EARLIEST"), "retrieval.initial_position"),  # type: ignore[arg-type]
        (lambda: RetrievalConfig(initial_position="AT_TIMESTAMP"), "retrieval.initial_timestamp"),
        (lambda: ProcessingConfig(on_failure="dlq"), "processing.dlq_url"),
        (lambda: ProcessingConfig(on_failure="skip"), "processing.on_failure"),  # type: ignore[arg-type]
        (lambda: ShutdownConfig(deadline=0), "shutdown.deadline"),
    ],
)
def test_invalid_settings_name_the_field(factory, field) -> None:
    with pytest.raises(ConfigError) as info:
        factory()
    assert info.value.field == field
    assert field in str(info.value)


def test_allowed_values_are_listed() -> None:
    with pytest.raises(ConfigError, match="TRIM_HORIZON, LATEST, AT_TIMESTAMP"):
        RetrievalConfig(initial_position="OLDEST")  # type: ignore[arg-type]


def _env(**extra: str) -> dict[str, str]:
    base = {
        "CONSUMER_APPLICATION": "app",
        "CONSUMER_STREAMS": "orders,clicks=consumer.examples.logging_processor:LoggingProcessor",
        "CONSUMER_PROCESSOR": "consumer.examples.logging_processor:LoggingProcessor",
        "CONSUMER_LEASE_TABLE": "l",
        "CONSUMER_CHECKPOINT_TABLE": "c",
    }
    return {**base, **extra}


def test_env_config_multiple_streams_and_numbers() -> None:
    cfg = worker_config_from_env(_env(CONSUMER_LEASE_DURATION_SECONDS="6"), load_processor)
    assert [s.name for s in cfg.streams] == ["orders", "clicks"]
    assert cfg.lease.lease_duration == 6
    assert cfg.lease.safety_margin == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("CONSUMER_LEASE_DURATION_SECONDS", "ten", "CONSUMER_LEASE_DURATION_SECONDS"),
        ("CONSUMER_APPLICATION", "", "CONSUMER_APPLICATION"),
        ("CONSUMER_ON_FAILURE", "ignore", "CONSUMER_ON_FAILURE"),
        ("CONSUMER_CHECKPOINT_MODE", "sometimes", "CONSUMER_CHECKPOINT_MODE"),
        ("CONSUMER_INITIAL_TIMESTAMP", "yesterday", "CONSUMER_INITIAL_TIMESTAMP"),
        ("CONSUMER_INITIAL_TIMESTAMP", "2024-05-01T12:00:00", "CONSUMER_INITIAL_TIMESTAMP"),
        ("CONSUMER_LEASE_DURATION_SECONDS", "inf", "CONSUMER_LEASE_DURATION_SECONDS"),
        ("CONSUMER_LEASE_DURATION_SECONDS", "nan", "CONSUMER_LEASE_DURATION_SECONDS"),
        ("CONSUMER_SAFETY_MARGIN_SECONDS", "-inf", "CONSUMER_SAFETY_MARGIN_SECONDS"),
        ("CONSUMER_SAFETY_MARGIN_SECONDS", "10", "CONSUMER_SAFETY_MARGIN_SECONDS"),
        ("CONSUMER_SCAN_INTERVAL_SECONDS", "30", "CONSUMER_SCAN_INTERVAL_SECONDS"),
        ("CONSUMER_MAX_RECORDS", "0", "CONSUMER_MAX_RECORDS"),
        ("CONSUMER_RETRIEVAL", "fanout", "CONSUMER_FANOUT_NAME"),
        ("CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS", "30", "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS"),
        ("CONSUMER_FORGET_WORKERS_AFTER_SECONDS", "5", "CONSUMER_FORGET_WORKERS_AFTER_SECONDS"),
        ("CONSUMER_WORKER_ID", "a#b", "CONSUMER_WORKER_ID"),
    ],
)
def test_env_errors_name_the_variable(key: str, value: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(**{key: value}), load_processor)
    assert info.value.field == field
    internal = [f"{section}." for section in ("lease", "retrieval", "checkpoint", "processing", "shutdown")]
    assert not [name for name in internal if name in str(info.value)], str(info.value)


def test_errors_that_involve_two_settings_name_both_variables() -> None:
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(CONSUMER_SAFETY_MARGIN_SECONDS="12"), load_processor)
    assert "CONSUMER_LEASE_DURATION_SECONDS" in str(info.value)
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(
            _env(CONSUMER_SHUTDOWN_DEADLINE_SECONDS="3", CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS="4"),
            load_processor,
        )
    assert info.value.field == "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS"
    assert "CONSUMER_SHUTDOWN_DEADLINE_SECONDS" in str(info.value)


def test_a_short_shutdown_deadline_is_accepted_and_caps_the_final_checkpoint_wait() -> None:
    cfg = worker_config_from_env(_env(CONSUMER_SHUTDOWN_DEADLINE_SECONDS="3"), load_processor)
    assert cfg.shutdown.deadline == 3
    assert cfg.shutdown.final_checkpoint_timeout == 3
    assert worker_config_from_env(_env(), load_processor).shutdown.final_checkpoint_timeout == 5


def test_timestamps_need_a_time_zone() -> None:
    cfg = worker_config_from_env(
        _env(CONSUMER_INITIAL_POSITION="AT_TIMESTAMP", CONSUMER_INITIAL_TIMESTAMP="2024-05-01T12:00:00Z"),
        load_processor,
    )
    assert cfg.retrieval.initial_timestamp is not None
    assert cfg.retrieval.initial_timestamp.utcoffset() is not None
    with pytest.raises(ConfigError, match="has no time zone"):
        parse_timestamp("2024-05-01T12:00:00", "--timestamp")


def test_polling_rate_warning() -> None:
    fast = worker_config_from_env(_env(CONSUMER_READS_PER_SECOND="20"), load_processor)
    message = polling_rate_warning(fast)
    assert message is not None and "CONSUMER_READS_PER_SECOND=20" in message and "20 times" in message
    greedy = worker_config_from_env(_env(CONSUMER_READ_BYTES_PER_SECOND="5000000"), load_processor)
    assert "2 MiB" in (polling_rate_warning(greedy) or "")
    # A short idle time is raised to the call rate: it cannot exceed the limit by itself.
    zero = worker_config_from_env(_env(CONSUMER_IDLE_TIME_SECONDS="0"), load_processor)
    assert polling_rate_warning(zero) is None
    assert polling_rate_warning(worker_config_from_env(_env(), load_processor)) is None
    fanout = _env(CONSUMER_READS_PER_SECOND="20", CONSUMER_RETRIEVAL="fanout", CONSUMER_FANOUT_NAME="f")
    assert polling_rate_warning(worker_config_from_env(fanout, load_processor)) is None
    for var in ("CONSUMER_READS_PER_SECOND", "CONSUMER_READ_BYTES_PER_SECOND"):
        with pytest.raises(ConfigError, match=f"{var}: must be"):
            worker_config_from_env(_env(**{var: "0"}), load_processor)


def test_every_variable_has_a_default_text_from_the_dataclasses() -> None:
    texts = {v.name: default_text(v) for v in ENV_VARS}
    assert texts["CONSUMER_LEASE_DURATION_SECONDS"] == "10"
    assert texts["CONSUMER_IDLE_TIME_SECONDS"] == str(RetrievalConfig().idle_time_between_reads)
    assert texts["CONSUMER_ON_FAILURE"] == "halt"
    assert texts["CONSUMER_APPLICATION"] == "required"
    assert all(v.help for v in ENV_VARS)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nocolon", "expected 'package.module:Class'"),
        ("no.such.module:X", "cannot import module 'no.such.module'"),
        ("consumer.examples.logging_processor:Nope", "has no attribute 'Nope'"),
        ("consumer.config:LeaseConfig", "lacks"),
    ],
)
def test_processor_load_errors_name_the_path(path: str, message: str) -> None:
    with pytest.raises(ProcessorLoadError, match=message) as info:
        load_processor(path)
    assert path in str(info.value)


def test_one_table_for_leases_and_checkpoints_is_refused_naming_the_checkpoint_table() -> None:
    with pytest.raises(ConfigError) as info:
        WorkerConfig("app", "t", "t", (StreamSpec("s", LoggingProcessor),))
    assert info.value.field == "checkpoint_table" and "must differ from the lease table ('t')" in str(
        info.value
    )
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(CONSUMER_CHECKPOINT_TABLE="l"), load_processor)
    assert str(info.value).startswith("CONSUMER_CHECKPOINT_TABLE: must differ from the lease table ('l')")


def test_a_rate_that_is_not_a_number_is_not_called_seconds() -> None:
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(CONSUMER_READS_PER_SECOND="abc"), load_processor)
    assert str(info.value) == (
        "CONSUMER_READS_PER_SECOND: must be a number of GetRecords calls per second, got 'abc'"
    )
    with pytest.raises(ConfigError, match="must be a number of seconds, got 'abc'"):
        worker_config_from_env(_env(CONSUMER_SCAN_INTERVAL_SECONDS="abc"), load_processor)


@pytest.mark.parametrize("key", ["CONSUMER_GIVE_UP_AFTER_SECONDS", "CONSUMER_FORGET_WORKERS_AFTER_SECONDS"])
def test_optional_durations_set_to_zero_are_refused_not_read_as_the_default(key: str) -> None:
    """0 is not "the default" (unset is): a value set is checked as given, like every other setting."""
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(**{key: "0"}), load_processor)
    assert str(info.value).startswith(f"{key}: must be a finite number > 0")
    cfg = worker_config_from_env(_env(**{key: ""}), load_processor)
    assert cfg.lease.give_up_after is None and cfg.lease.forget_workers_after is None
    assert cfg.lease.give_up_seconds == cfg.lease.lease_duration


class _OnlyOrders(LoggingProcessor):
    """A processor that serves only the stream called ``orders``."""

    def check_source_stream(self, stream: str) -> None:
        if stream != "orders":
            raise ConfigError("ONLY_ORDERS", f"cannot read {stream!r}")


def test_a_processor_is_told_its_stream_when_made_for_it() -> None:
    """The hook the copier uses to refuse its own source as its target: called as the worker (and its
    start-up checks) make a processor for a stream."""
    cfg = worker_config_from_env(
        {k: v for k, v in _env(CONSUMER_STREAMS="orders,clicks").items() if k != "CONSUMER_PROCESSOR"},
        load_processor,
        processor=_OnlyOrders,
    )
    assert isinstance(cfg.stream("orders").processor_factory(), _OnlyOrders)
    with pytest.raises(ConfigError, match="ONLY_ORDERS: cannot read 'clicks'"):
        cfg.stream("clicks").processor_factory()
