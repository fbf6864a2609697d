"""Typed, frozen settings: one dataclass per concern, validated at construction with errors naming the field.

The concerns' dataclasses live in :mod:`consumer.settings` (leases, retrieval, processing, the raw sink);
this module gathers them into :class:`WorkerConfig` and reads them from the environment, and is where they
are imported from.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from consumer.env_vars import ENV_VARS, PROCESSOR_ENV_VARS, EnvVar, variable_for
from consumer.errors import ConfigError, ProcessorLoadError
from consumer.settings.env import env_float, env_int, env_optional_float, parse_timestamp
from consumer.settings.lease import LeaseConfig
from consumer.settings.processing import CheckpointConfig, HealthConfig, ProcessingConfig, ShutdownConfig
from consumer.settings.raw_sink import RawSinkConfig, raw_sink_config_from_env
from consumer.settings.retrieval import InitialPosition, RetrievalConfig
from consumer.settings.streams import (
    PROCESSOR_CHECKPOINT_MODES,
    ProcessorFactory,
    ProcessorLoader,
    StreamSpec,
    check_processor_factory,
    for_stream,
    stream_specs,
)
from consumer.settings.threads import ThreadsConfig

__all__ = [
    "PROCESSOR_CHECKPOINT_MODES",
    "CheckpointConfig",
    "HealthConfig",
    "InitialPosition",
    "LeaseConfig",
    "ProcessingConfig",
    "ProcessorFactory",
    "ProcessorLoader",
    "RawSinkConfig",
    "RetrievalConfig",
    "ShutdownConfig",
    "StreamSpec",
    "ThreadsConfig",
    "WorkerConfig",
    "check_processor_factory",
    "default_text",
    "env_float",
    "env_int",
    "field_default",
    "parse_timestamp",
    "polling_rate_warning",
    "raw_sink_config_from_env",
    "settings_from_env",
    "worker_config_from_env",
]

_S = TypeVar("_S")

# WorkerConfig's sections and the type each must have (a dict or another section is refused, naming it).
_SECTION_TYPES: dict[str, type] = {
    "lease": LeaseConfig,
    "retrieval": RetrievalConfig,
    "checkpoint": CheckpointConfig,
    "processing": ProcessingConfig,
    "shutdown": ShutdownConfig,
    "health": HealthConfig,
    "threads": ThreadsConfig,
}


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one worker needs; boto3 clients are injected separately."""

    application: str
    lease_table: str
    checkpoint_table: str
    streams: tuple[StreamSpec, ...]
    worker_id: str = field(default_factory=_default_worker_id)
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    processing: ProcessingConfig = field(default_factory=ProcessingConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)

    def __post_init__(self) -> None:
        for name in ("application", "lease_table", "checkpoint_table", "worker_id"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise ConfigError(name, f"must be a string, got {type(value).__name__}")
            if not value.strip():
                raise ConfigError(name, "must not be empty")
        for name, kind in _SECTION_TYPES.items():
            value = getattr(self, name)
            if not isinstance(value, kind):
                raise ConfigError(name, f"must be a {kind.__name__}, got {type(value).__name__}")
        object.__setattr__(self, "streams", stream_specs(self.streams))  # a list given is kept as a tuple
        if self.lease_table == self.checkpoint_table:
            raise ConfigError(
                "checkpoint_table",
                f"must differ from the lease table ({self.lease_table!r}): the two tables hold different "
                "items under the same keys",
            )
        if "#" in self.worker_id:
            raise ConfigError("worker_id", "must not contain '#'")
        if not self.streams:
            raise ConfigError("streams", "at least one stream is required")
        names = [s.name for s in self.streams]
        if len(set(names)) != len(names):
            raise ConfigError("streams", f"stream names must be unique, got {names}")

    def stream(self, name: str) -> StreamSpec:
        """The spec of the stream called ``name`` (``KeyError`` if this worker does not consume it)."""
        for spec in self.streams:
            if spec.name == name:
                return spec
        raise KeyError(f"stream {name!r} is not one this worker consumes ({[s.name for s in self.streams]})")


# -- from the environment -------------------------------------------------------------------------------

_SECTIONS: dict[str, type] = {**_SECTION_TYPES, "raw_sink": RawSinkConfig}
# Processor settings the environment sets (a processor declares one as its ``settings_type``).
_PROCESSOR_SETTINGS: dict[type, Callable[[Mapping[str, str]], Any]] = {
    RawSinkConfig: raw_sink_config_from_env
}

#: Polling faster than this can exceed Kinesis's 5 GetRecords per second per shard.
AWS_READS_PER_SECOND = 5.0  # GetRecords per shard (Kinesis Data Streams quotas)
AWS_READ_BYTES_PER_SECOND = 2 * 1024 * 1024


def field_default(field: str) -> Any:
    """The dataclass default of ``section.field`` (``lease.lease_duration`` -> 10.0)."""
    section, _, name = field.partition(".")
    cls = _SECTIONS[section]
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def _format(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)


def default_text(var: EnvVar) -> str:
    """What ``run --help`` and the docs show as the variable's default."""
    if var.required:
        return "required"
    if var.default is not None:
        return var.default
    return _format(field_default(var.field))


def settings_from_env(settings_type: type[_S], env: Mapping[str, str]) -> _S:
    """A processor's declared settings (e.g. :class:`RawSinkConfig`) read from ``env``, errors naming the
    variable; ``TypeError`` for a type this module does not read."""
    read = _PROCESSOR_SETTINGS.get(settings_type)
    if read is None:
        raise TypeError(f"{settings_type.__name__} is not a settings type consumer.config reads")
    value: _S = read(env)
    return value


def _for_operator(exc: ConfigError) -> ConfigError:
    """The same error, naming the variables the operator sets instead of the config fields."""
    message = str(exc)[len(exc.field) + 2 :]
    rows = (v for v in (*ENV_VARS, *PROCESSOR_ENV_VARS) if "." in v.field)
    for var in sorted(rows, key=lambda v: -len(v.field)):
        message = message.replace(var.field, var.name)
    return ConfigError(variable_for(exc.field) or exc.field, message)


def _default(field: str) -> Any:
    return field_default(field)


def worker_config_from_env(
    env: Mapping[str, str],
    load_processor: ProcessorLoader,
    *,
    processor: ProcessorFactory | None = None,
) -> WorkerConfig:
    """Build a ``WorkerConfig`` from ``CONSUMER_*`` variables (``consumer.env_vars.ENV_VARS`` lists them).

    ``CONSUMER_STREAMS`` is ``name`` or ``name=package.module:Class`` items separated by commas; streams
    without their own processor use ``CONSUMER_PROCESSOR``, or ``processor`` (a class or factory given in
    code) when that variable is unset. Every error names the variable to change.
    """
    try:
        return _from_env(env, load_processor, processor)
    except ConfigError as exc:
        raise _for_operator(exc) from None


def _from_env(
    env: Mapping[str, str],
    load_processor: ProcessorLoader,
    processor: ProcessorFactory | None = None,
) -> WorkerConfig:
    def required(key: str) -> str:
        value = env.get(key, "").strip()
        if not value:
            raise ConfigError(key, "is required")
        return value

    def f(key: str, field: str) -> float:
        return env_float(env, key, _default(field))

    def text(key: str, field: str) -> Any:  # a choice: the dataclass names the allowed values
        return env.get(key, "").strip() or _default(field)

    default_processor = env.get("CONSUMER_PROCESSOR", "").strip()
    specs = []
    for item in (p.strip() for p in required("CONSUMER_STREAMS").split(",")):
        if not item:
            continue
        name, _, path = item.partition("=")
        path = path or default_processor
        if not path and processor is not None:
            specs.append(StreamSpec(name.strip(), for_stream(name.strip(), processor)))
            continue
        if not path:
            raise ConfigError(
                "CONSUMER_PROCESSOR", f"no processor for stream {name!r} (set it, or {name}=pkg.mod:Class)"
            )
        setting = "CONSUMER_STREAMS" if item.partition("=")[2] else "CONSUMER_PROCESSOR"
        try:
            factory = load_processor(path.strip(), env)
        except ProcessorLoadError as exc:
            raise ProcessorLoadError(f"{setting}: {exc}") from exc.__cause__
        specs.append(StreamSpec(name.strip(), for_stream(name.strip(), factory)))
    ts_raw = env.get("CONSUMER_INITIAL_TIMESTAMP", "").strip()
    timestamp = parse_timestamp(ts_raw, "CONSUMER_INITIAL_TIMESTAMP") if ts_raw else None
    lease_duration = f("CONSUMER_LEASE_DURATION_SECONDS", "lease.lease_duration")
    deadline = f("CONSUMER_SHUTDOWN_DEADLINE_SECONDS", "shutdown.deadline")
    return WorkerConfig(
        application=required("CONSUMER_APPLICATION"),
        lease_table=required("CONSUMER_LEASE_TABLE"),
        checkpoint_table=required("CONSUMER_CHECKPOINT_TABLE"),
        streams=tuple(specs),
        worker_id=env.get("CONSUMER_WORKER_ID", "").strip() or _default_worker_id(),
        lease=LeaseConfig(
            lease_duration=lease_duration,
            safety_margin=env_float(env, "CONSUMER_SAFETY_MARGIN_SECONDS", lease_duration / 5),
            scan_interval=f("CONSUMER_SCAN_INTERVAL_SECONDS", "lease.scan_interval"),
            inbox_poll_interval=f("CONSUMER_INBOX_POLL_SECONDS", "lease.inbox_poll_interval"),
            idle_poll_interval=f("CONSUMER_IDLE_POLL_SECONDS", "lease.idle_poll_interval"),
            leader_check_interval=f("CONSUMER_LEADER_CHECK_SECONDS", "lease.leader_check_interval"),
            max_moves_per_second=env_int(
                env, "CONSUMER_MAX_MOVES_PER_SECOND", _default("lease.max_moves_per_second")
            ),
            discovery_interval=f("CONSUMER_DISCOVERY_INTERVAL_SECONDS", "lease.discovery_interval"),
            # Unset: derived from the lease duration; a value set (0 too) is checked as given.
            give_up_after=env_optional_float(env, "CONSUMER_GIVE_UP_AFTER_SECONDS"),
            forget_workers_after=env_optional_float(env, "CONSUMER_FORGET_WORKERS_AFTER_SECONDS"),
        ),
        retrieval=RetrievalConfig(
            mode=text("CONSUMER_RETRIEVAL", "retrieval.mode"),
            max_records=env_int(env, "CONSUMER_MAX_RECORDS", _default("retrieval.max_records")),
            idle_time_between_reads=f("CONSUMER_IDLE_TIME_SECONDS", "retrieval.idle_time_between_reads"),
            reads_per_second=env_float(
                env,
                "CONSUMER_READS_PER_SECOND",
                _default("retrieval.reads_per_second"),
                what="a number of GetRecords calls per second",
            ),
            read_bytes_per_second=env_int(
                env, "CONSUMER_READ_BYTES_PER_SECOND", _default("retrieval.read_bytes_per_second")
            ),
            initial_position=text("CONSUMER_INITIAL_POSITION", "retrieval.initial_position"),
            initial_timestamp=timestamp,
            fanout_consumer_name=env.get("CONSUMER_FANOUT_NAME", "").strip() or None,
            prefetch_batches=env_int(
                env, "CONSUMER_PREFETCH_BATCHES", _default("retrieval.prefetch_batches")
            ),
        ),
        checkpoint=CheckpointConfig(
            mode=text("CONSUMER_CHECKPOINT_MODE", "checkpoint.mode"),
            flush_interval=f("CONSUMER_CHECKPOINT_FLUSH_SECONDS", "checkpoint.flush_interval"),
            auto_interval=f("CONSUMER_CHECKPOINT_INTERVAL_SECONDS", "checkpoint.auto_interval"),
            max_pending_records=env_int(
                env, "CONSUMER_MAX_PENDING_RECORDS", _default("checkpoint.max_pending_records")
            ),
        ),
        processing=ProcessingConfig(
            max_attempts=env_int(env, "CONSUMER_MAX_ATTEMPTS", _default("processing.max_attempts")),
            on_failure=text("CONSUMER_ON_FAILURE", "processing.on_failure"),
            dlq_url=env.get("CONSUMER_DLQ_URL", "").strip() or None,
        ),
        shutdown=ShutdownConfig(
            deadline=deadline,
            final_checkpoint_timeout=env_float(
                env,
                "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS",
                min(_default("shutdown.final_checkpoint_timeout"), deadline),
            ),
        ),
        health=HealthConfig(
            file=env.get("CONSUMER_HEALTH_FILE", "").strip() or None,
            max_age=f("CONSUMER_HEALTH_MAX_AGE_SECONDS", "health.max_age"),
        ),
        threads=ThreadsConfig(
            fetch_threads=env_int(env, "CONSUMER_FETCH_THREADS", _default("threads.fetch_threads")),
            processor_threads=env_int(
                env, "CONSUMER_PROCESSOR_THREADS", _default("threads.processor_threads")
            ),
        ),
    )


def polling_rate_warning(config: WorkerConfig) -> str | None:
    """A warning when polling could exceed Kinesis's per-shard read limits (None when it cannot)."""
    r = config.retrieval
    if r.mode != "polling":
        return None
    if r.reads_per_second > AWS_READS_PER_SECOND:
        return (
            f"CONSUMER_READS_PER_SECOND={_format(r.reads_per_second)}: a shard may be read up to "
            f"{r.reads_per_second:g} times per second, over Kinesis's limit of 5 GetRecords per second per "
            "shard (shared by every application reading the stream); calls over it are throttled"
        )
    if r.read_bytes_per_second > AWS_READ_BYTES_PER_SECOND:
        return (
            f"CONSUMER_READ_BYTES_PER_SECOND={r.read_bytes_per_second}: a shard behind may be read at up to "
            f"{r.read_bytes_per_second} bytes per second, over Kinesis's limit of 2 MiB per second per shard; "
            "calls over it are throttled"
        )
    return None
