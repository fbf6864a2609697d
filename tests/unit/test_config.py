from __future__ import annotations

import pytest

from consumer.config import (
    LeaseConfig,
    ProcessingConfig,
    RetrievalConfig,
    ShutdownConfig,
    worker_config_from_env,
)
from consumer.errors import ConfigError, ProcessorLoadError
from consumer.loader import load_processor


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: LeaseConfig(lease_duration=-1), "lease.lease_duration"),
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
        ("CONSUMER_ON_FAILURE", "ignore", "processing.on_failure"),
        ("CONSUMER_CHECKPOINT_MODE", "sometimes", "checkpoint.mode"),
        ("CONSUMER_INITIAL_TIMESTAMP", "yesterday", "CONSUMER_INITIAL_TIMESTAMP"),
    ],
)
def test_env_errors_name_the_variable(key: str, value: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        worker_config_from_env(_env(**{key: value}), load_processor)
    assert info.value.field == field


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
