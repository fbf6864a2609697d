"""Typed, frozen settings: one dataclass per concern, validated at construction with errors naming the field."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from consumer.errors import ConfigError

if TYPE_CHECKING:
    from consumer.lifecycle.processor import RecordProcessor

__all__ = [
    "CheckpointConfig",
    "LeaseConfig",
    "ProcessingConfig",
    "RetrievalConfig",
    "ShutdownConfig",
    "StreamSpec",
    "WorkerConfig",
    "worker_config_from_env",
]

InitialPosition = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]
ProcessorFactory = Callable[[], "RecordProcessor"]


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(name, f"must be > 0, got {value!r}")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, f"must be one of {', '.join(allowed)}; got {value!r}")


@dataclass(frozen=True)
class LeaseConfig:
    """How leases are held and observed.

    A taker waits ``lease_duration`` (its own monotonic clock) without seeing the owner's heartbeat move;
    an owner stops delivering ``safety_margin`` before that, counted from the start of its last good heartbeat.
    """

    lease_duration: float = 10.0
    safety_margin: float = 2.0
    heartbeat_interval: float | None = None
    scan_interval: float = 1.0
    inbox_poll_interval: float = 0.2
    discovery_interval: float = 10.0
    handoff_timeout: float | None = None
    max_leases_per_worker: int | None = None
    give_up_after: float | None = None  # a shard failing transiently this long is released (default: lease)
    forget_workers_after: float | None = (
        None  # silent worker items are deleted after this (default: 3 leases)
    )

    def __post_init__(self) -> None:
        _positive("lease.lease_duration", self.lease_duration)
        for name in ("give_up_after", "forget_workers_after"):
            if getattr(self, name) is not None:
                _positive(f"lease.{name}", getattr(self, name))
        if self.forget_workers_after is not None and self.forget_workers_after < 2 * self.lease_duration:
            raise ConfigError("lease.forget_workers_after", "must be at least twice lease_duration")
        if not 0 < self.safety_margin < self.lease_duration:
            raise ConfigError(
                "lease.safety_margin", f"must be > 0 and < lease_duration ({self.lease_duration})"
            )
        if self.heartbeat_interval is not None and not (
            0 < self.heartbeat_interval < self.lease_duration - self.safety_margin
        ):
            raise ConfigError(
                "lease.heartbeat_interval",
                f"must be > 0 and < lease_duration - safety_margin "
                f"({self.lease_duration - self.safety_margin}); got {self.heartbeat_interval}",
            )
        for name in ("scan_interval", "inbox_poll_interval", "discovery_interval"):
            _positive(f"lease.{name}", getattr(self, name))
        if self.scan_interval >= self.lease_duration:
            raise ConfigError("lease.scan_interval", "must be shorter than lease_duration")
        if self.handoff_timeout is not None:
            _positive("lease.handoff_timeout", self.handoff_timeout)
        if self.max_leases_per_worker is not None and self.max_leases_per_worker < 1:
            raise ConfigError("lease.max_leases_per_worker", "must be >= 1 or unset")

    @property
    def heartbeat_every(self) -> float:
        """Default: half the owner's window, so one failed heartbeat can be retried before it closes."""
        return self.heartbeat_interval or (self.lease_duration - self.safety_margin) / 2

    @property
    def owner_validity(self) -> float:
        return self.lease_duration - self.safety_margin

    @property
    def give_up_seconds(self) -> float:
        """How long a shard may keep failing transiently before its owner releases it for another worker."""
        return self.give_up_after or self.lease_duration

    @property
    def forget_workers_seconds(self) -> float:
        """How long a worker item may stay silent before a live worker deletes it."""
        return self.forget_workers_after or 3 * self.lease_duration

    @property
    def handoff_stall_after(self) -> float:
        return self.handoff_timeout or 2 * self.lease_duration


@dataclass(frozen=True)
class RetrievalConfig:
    """How records are fetched: polling GetRecords (default) or enhanced fan-out."""

    mode: Literal["polling", "fanout"] = "polling"
    max_records: int = 1000
    idle_time_between_reads: float = 0.25
    initial_position: InitialPosition = "TRIM_HORIZON"
    initial_timestamp: datetime | None = None
    backoff_base: float = 0.2
    backoff_max: float = 5.0
    fanout_consumer_name: str | None = None

    def __post_init__(self) -> None:
        _choice("retrieval.mode", self.mode, ("polling", "fanout"))
        if not 1 <= self.max_records <= 10000:
            raise ConfigError("retrieval.max_records", f"must be 1..10000, got {self.max_records}")
        if self.idle_time_between_reads < 0:
            raise ConfigError("retrieval.idle_time_between_reads", "must be >= 0")
        _choice(
            "retrieval.initial_position", self.initial_position, ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
        )
        if (self.initial_position == "AT_TIMESTAMP") != (self.initial_timestamp is not None):
            raise ConfigError(
                "retrieval.initial_timestamp", "is required with AT_TIMESTAMP and only allowed with it"
            )
        _positive("retrieval.backoff_base", self.backoff_base)
        if self.backoff_max < self.backoff_base:
            raise ConfigError("retrieval.backoff_max", "must be >= backoff_base")
        if self.mode == "fanout" and not self.fanout_consumer_name:
            raise ConfigError("retrieval.fanout_consumer_name", "is required when mode is fanout")


@dataclass(frozen=True)
class CheckpointConfig:
    """``auto`` checkpoints after each successful batch; ``manual`` advances over records marked done."""

    mode: Literal["auto", "manual"] = "auto"
    flush_interval: float = 1.0
    auto_interval: float = (
        0.0  # auto mode: at most one checkpoint write per this many seconds (0: every batch)
    )

    def __post_init__(self) -> None:
        _choice("checkpoint.mode", self.mode, ("auto", "manual"))
        _positive("checkpoint.flush_interval", self.flush_interval)
        if self.auto_interval < 0:
            raise ConfigError("checkpoint.auto_interval", f"must be >= 0, got {self.auto_interval}")


@dataclass(frozen=True)
class ProcessingConfig:
    """Processor failures: retried with backoff, then dead-lettered (``dlq``) or the shard halts (``halt``)."""

    max_attempts: int = 3
    backoff_base: float = 0.1
    backoff_max: float = 5.0
    on_failure: Literal["halt", "dlq"] = "halt"
    dlq_url: str | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("processing.max_attempts", f"must be >= 1, got {self.max_attempts}")
        _positive("processing.backoff_base", self.backoff_base)
        _choice("processing.on_failure", self.on_failure, ("halt", "dlq"))
        if self.on_failure == "dlq" and not self.dlq_url:
            raise ConfigError("processing.dlq_url", "is required when on_failure is dlq")


@dataclass(frozen=True)
class ShutdownConfig:
    """The whole graceful shutdown (drain, final checkpoints, hand-offs) fits inside ``deadline`` seconds."""

    deadline: float = 20.0
    final_checkpoint_timeout: float = 5.0

    def __post_init__(self) -> None:
        _positive("shutdown.deadline", self.deadline)
        if not 0 < self.final_checkpoint_timeout <= self.deadline:
            raise ConfigError("shutdown.final_checkpoint_timeout", "must be > 0 and <= shutdown.deadline")


@dataclass(frozen=True)
class StreamSpec:
    """One stream this application consumes and the factory of its record processors (one per shard)."""

    name: str
    processor_factory: ProcessorFactory

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128:
            raise ConfigError("streams", f"stream name must be 1..128 characters, got {self.name!r}")


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

    def __post_init__(self) -> None:
        for name in ("application", "lease_table", "checkpoint_table", "worker_id"):
            if not getattr(self, name):
                raise ConfigError(name, "must not be empty")
        if "#" in self.worker_id:
            raise ConfigError("worker_id", "must not contain '#'")
        if not self.streams:
            raise ConfigError("streams", "at least one stream is required")
        names = [s.name for s in self.streams]
        if len(set(names)) != len(names):
            raise ConfigError("streams", f"stream names must be unique, got {names}")

    def stream(self, name: str) -> StreamSpec:
        return next(s for s in self.streams if s.name == name)


def _env_float(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(key, f"must be a number, got {raw!r}") from None


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {raw!r}") from None


def worker_config_from_env(
    env: Mapping[str, str], load_processor: Callable[[str], ProcessorFactory]
) -> WorkerConfig:
    """Build a ``WorkerConfig`` from ``CONSUMER_*`` variables (see docs/operations.md for the list).

    ``CONSUMER_STREAMS`` is ``name`` or ``name=package.module:Class`` items separated by commas; streams
    without their own processor use ``CONSUMER_PROCESSOR``.
    """

    def required(key: str) -> str:
        value = env.get(key, "")
        if not value:
            raise ConfigError(key, "is required")
        return value

    default_processor = env.get("CONSUMER_PROCESSOR", "")
    specs = []
    for item in (p.strip() for p in required("CONSUMER_STREAMS").split(",")):
        if not item:
            continue
        name, _, path = item.partition("=")
        path = path or default_processor
        if not path:
            raise ConfigError("CONSUMER_PROCESSOR", f"no processor for stream {name!r}")
        specs.append(StreamSpec(name.strip(), load_processor(path.strip())))
    ts_raw = env.get("CONSUMER_INITIAL_TIMESTAMP")
    try:
        timestamp = datetime.fromisoformat(ts_raw) if ts_raw else None
    except ValueError:
        raise ConfigError("CONSUMER_INITIAL_TIMESTAMP", f"must be ISO-8601, got {ts_raw!r}") from None
    lease_duration = _env_float(env, "CONSUMER_LEASE_DURATION_SECONDS", 10.0)
    return WorkerConfig(
        application=required("CONSUMER_APPLICATION"),
        lease_table=required("CONSUMER_LEASE_TABLE"),
        checkpoint_table=required("CONSUMER_CHECKPOINT_TABLE"),
        streams=tuple(specs),
        worker_id=env.get("CONSUMER_WORKER_ID") or _default_worker_id(),
        lease=LeaseConfig(
            lease_duration=lease_duration,
            safety_margin=_env_float(env, "CONSUMER_SAFETY_MARGIN_SECONDS", lease_duration / 5),
            scan_interval=_env_float(env, "CONSUMER_SCAN_INTERVAL_SECONDS", 1.0),
            inbox_poll_interval=_env_float(env, "CONSUMER_INBOX_POLL_SECONDS", 0.2),
            discovery_interval=_env_float(env, "CONSUMER_DISCOVERY_INTERVAL_SECONDS", 10.0),
            give_up_after=_env_float(env, "CONSUMER_GIVE_UP_AFTER_SECONDS", 0.0) or None,
            forget_workers_after=_env_float(env, "CONSUMER_FORGET_WORKERS_AFTER_SECONDS", 0.0) or None,
        ),
        retrieval=RetrievalConfig(
            mode=env.get("CONSUMER_RETRIEVAL", "polling"),  # type: ignore[arg-type]
            max_records=_env_int(env, "CONSUMER_MAX_RECORDS", 1000),
            idle_time_between_reads=_env_float(env, "CONSUMER_IDLE_TIME_SECONDS", 0.25),
            initial_position=env.get("CONSUMER_INITIAL_POSITION", "TRIM_HORIZON"),  # type: ignore[arg-type]
            initial_timestamp=timestamp,
            fanout_consumer_name=env.get("CONSUMER_FANOUT_NAME") or None,
        ),
        checkpoint=CheckpointConfig(
            mode=env.get("CONSUMER_CHECKPOINT_MODE", "auto"),  # type: ignore[arg-type]
            flush_interval=_env_float(env, "CONSUMER_CHECKPOINT_FLUSH_SECONDS", 1.0),
            auto_interval=_env_float(env, "CONSUMER_CHECKPOINT_INTERVAL_SECONDS", 0.0),
        ),
        processing=ProcessingConfig(
            max_attempts=_env_int(env, "CONSUMER_MAX_ATTEMPTS", 3),
            on_failure=env.get("CONSUMER_ON_FAILURE", "halt"),  # type: ignore[arg-type]
            dlq_url=env.get("CONSUMER_DLQ_URL") or None,
        ),
        shutdown=ShutdownConfig(deadline=_env_float(env, "CONSUMER_SHUTDOWN_DEADLINE_SECONDS", 20.0)),
    )
