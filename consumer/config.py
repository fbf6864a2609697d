"""Typed, frozen settings: one dataclass per concern, validated at construction with errors naming the field."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from consumer.env_vars import ENV_VARS, EnvVar, variable_for
from consumer.errors import ConfigError, ProcessorLoadError

if TYPE_CHECKING:
    from consumer.lifecycle.async_processor import AsyncRecordProcessor
    from consumer.lifecycle.processor import RecordProcessor

__all__ = [
    "CheckpointConfig",
    "HealthConfig",
    "LeaseConfig",
    "ProcessingConfig",
    "RetrievalConfig",
    "ShutdownConfig",
    "StreamSpec",
    "WorkerConfig",
    "default_text",
    "env_float",
    "env_int",
    "field_default",
    "parse_timestamp",
    "polling_rate_warning",
    "worker_config_from_env",
]

InitialPosition = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]
# A processor class or any callable making one processor per shard (synchronous or asyncio).
ProcessorFactory = Callable[[], "RecordProcessor | AsyncRecordProcessor"]


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(name, f"must be a finite number > 0, got {value!r}")


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
    scan_interval: float = 1.0  # the leader's read of the whole table
    inbox_poll_interval: float = 0.1  # our own item, while something is under way
    idle_poll_interval: float = 1.0  # our own item, when nothing is under way
    leader_check_interval: float = 1.0  # the leader's heartbeat, watched by the other workers
    max_moves_per_second: int = 200  # the leader's lease moves (keeps a fleet start within throughput)
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
            raise ConfigError(
                "lease.forget_workers_after",
                f"must be at least twice lease.lease_duration ({2 * self.lease_duration})",
            )
        if not 0 < self.safety_margin < self.lease_duration:
            raise ConfigError(
                "lease.safety_margin",
                f"must be > 0 and < lease.lease_duration ({self.lease_duration}); got {self.safety_margin}",
            )
        if self.heartbeat_interval is not None and not (
            0 < self.heartbeat_interval < self.lease_duration - self.safety_margin
        ):
            raise ConfigError(
                "lease.heartbeat_interval",
                f"must be > 0 and < lease.lease_duration - lease.safety_margin "
                f"({self.lease_duration - self.safety_margin}); got {self.heartbeat_interval}",
            )
        _check_cadence(self)
        if self.handoff_timeout is not None:
            _positive("lease.handoff_timeout", self.handoff_timeout)
        if self.max_leases_per_worker is not None and self.max_leases_per_worker < 1:
            raise ConfigError("lease.max_leases_per_worker", "must be >= 1 or unset")

    @property
    def heartbeat_every(self) -> float:
        """Default: half the owner's window, so one failed heartbeat can be retried before it closes."""
        return self.heartbeat_interval or (self.lease_duration - self.safety_margin) / 2

    @property
    def idle_poll(self) -> float:
        """The quiet-time poll of our own item (never faster than the busy one)."""
        return max(self.idle_poll_interval, self.inbox_poll_interval)

    @property
    def owner_validity(self) -> float:
        """Seconds after a good heartbeat's start during which the owner may still deliver."""
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
        """Seconds after which an unanswered hand-off counts as stalled (metric and alarm)."""
        return self.handoff_timeout or 2 * self.lease_duration


def _check_cadence(c: LeaseConfig) -> None:
    """The polling and planning intervals, against each other and the lease duration."""
    for name in (
        "scan_interval",
        "inbox_poll_interval",
        "idle_poll_interval",
        "leader_check_interval",
        "discovery_interval",
    ):
        _positive(f"lease.{name}", getattr(c, name))
    if c.max_moves_per_second < 5:
        raise ConfigError("lease.max_moves_per_second", f"must be >= 5; got {c.max_moves_per_second}")
    if c.leader_check_interval >= c.lease_duration:
        raise ConfigError(
            "lease.leader_check_interval",
            f"must be shorter than lease.lease_duration ({c.lease_duration}); got {c.leader_check_interval}",
        )
    if c.scan_interval >= c.lease_duration:
        raise ConfigError(
            "lease.scan_interval",
            f"must be shorter than lease.lease_duration ({c.lease_duration}); got {c.scan_interval}",
        )


@dataclass(frozen=True)
class RetrievalConfig:
    """How records are fetched: polling GetRecords (default) or enhanced fan-out."""

    mode: Literal["polling", "fanout"] = "polling"
    max_records: int = 10000  # GetRecords' own maximum: a backlog is read in as few calls as AWS allows
    idle_time_between_reads: float = 0.25  # start to start, once a shard is caught up
    # Per shard, a little under AWS's 5 GetRecords calls and 2 MiB read a second (consumer.retrieval.pacing).
    reads_per_second: float = 4.75
    read_bytes_per_second: int = 2_080_000
    initial_position: InitialPosition = "TRIM_HORIZON"
    initial_timestamp: datetime | None = None
    backoff_base: float = 0.2
    backoff_max: float = 1.0  # capped low: a shard resumes within about a second of an outage ending
    fanout_consumer_name: str | None = None
    # Seconds between two SubscribeToShard of a shard: AWS allows 1 a second per consumer and shard.
    fanout_subscribe_interval: float = 1.05
    prefetch_batches: int = 1  # fetched ahead while the processor works (0: fetch only when asked)

    def __post_init__(self) -> None:
        _choice("retrieval.mode", self.mode, ("polling", "fanout"))
        if not 1 <= self.max_records <= 10000:
            raise ConfigError("retrieval.max_records", f"must be 1..10000, got {self.max_records}")
        if self.idle_time_between_reads < 0:
            raise ConfigError(
                "retrieval.idle_time_between_reads", f"must be >= 0, got {self.idle_time_between_reads}"
            )
        _choice(
            "retrieval.initial_position", self.initial_position, ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
        )
        if (self.initial_position == "AT_TIMESTAMP") != (self.initial_timestamp is not None):
            raise ConfigError(
                "retrieval.initial_timestamp",
                "is required with retrieval.initial_position AT_TIMESTAMP and only allowed with it",
            )
        _positive("retrieval.reads_per_second", self.reads_per_second)
        _positive("retrieval.read_bytes_per_second", self.read_bytes_per_second)
        if not 0 <= self.fanout_subscribe_interval < math.inf:
            raise ConfigError(
                "retrieval.fanout_subscribe_interval", f"must be >= 0, got {self.fanout_subscribe_interval}"
            )
        _positive("retrieval.backoff_base", self.backoff_base)
        if self.backoff_max < self.backoff_base:
            raise ConfigError("retrieval.backoff_max", "must be >= retrieval.backoff_base")
        if self.mode == "fanout" and not self.fanout_consumer_name:
            raise ConfigError("retrieval.fanout_consumer_name", "is required when retrieval.mode is fanout")
        if not 0 <= self.prefetch_batches <= 16:
            raise ConfigError("retrieval.prefetch_batches", f"must be 0..16, got {self.prefetch_batches}")


@dataclass(frozen=True)
class CheckpointConfig:
    """``auto`` checkpoints after each successful batch; ``manual`` advances over records marked done."""

    mode: Literal["auto", "manual"] = "auto"
    flush_interval: float = 1.0
    auto_interval: float = (
        0.0  # auto mode: at most one checkpoint write per this many seconds (0: every batch)
    )
    # Manual mode: records delivered and not yet done, per shard, past which fetching pauses (the memory
    # a processor that never marks a record done can hold). Keep it above a buffering sink's batch size.
    max_pending_records: int = 100_000

    def __post_init__(self) -> None:
        _choice("checkpoint.mode", self.mode, ("auto", "manual"))
        _positive("checkpoint.flush_interval", self.flush_interval)
        if self.max_pending_records < 1:
            raise ConfigError(
                "checkpoint.max_pending_records", f"must be >= 1, got {self.max_pending_records}"
            )
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
            raise ConfigError("processing.dlq_url", "is required when processing.on_failure is dlq")


@dataclass(frozen=True)
class ShutdownConfig:
    """The whole graceful shutdown (drain, final checkpoints, hand-offs) fits inside ``deadline`` seconds."""

    deadline: float = 20.0
    final_checkpoint_timeout: float = 5.0

    def __post_init__(self) -> None:
        _positive("shutdown.deadline", self.deadline)
        if not 0 < self.final_checkpoint_timeout <= self.deadline:
            raise ConfigError(
                "shutdown.final_checkpoint_timeout",
                f"must be > 0 and <= shutdown.deadline ({self.deadline}); got {self.final_checkpoint_timeout}",
            )


@dataclass(frozen=True)
class HealthConfig:
    """Liveness: the coordinator loop touches ``file`` on every step (at least once a second while it runs);
    ``python -m consumer health`` fails when the file is older than ``max_age`` seconds, or missing."""

    file: str | None = None
    max_age: float = 30.0

    def __post_init__(self) -> None:
        _positive("health.max_age", self.max_age)


@dataclass(frozen=True)
class ThreadsConfig:
    """The worker's shard runner: two bounded pools, each growing a thread at a time as the work needs it.

    ``fetch_threads`` run GetRecords (or wait on fan-out subscriptions) for every shard; ``processor_threads``
    run the processors' calls and the checkpoint writes, one at a time per shard. A processor that blocks
    holds one processor thread: past ``processor_threads`` blocked shards, the others' batches wait (their
    fetches, the heartbeats and the coordinator never do). The clients' connection pools follow: Kinesis
    ``kinesis_connections``, DynamoDB ``dynamodb_connections``, so a pool thread never waits for a connection.
    """

    fetch_threads: int = 32
    processor_threads: int = 256  # a thread per shard up to here, as before for realistic shard counts

    def __post_init__(self) -> None:
        for name in ("fetch_threads", "processor_threads"):
            if not 1 <= getattr(self, name) <= 4096:
                raise ConfigError(f"threads.{name}", f"must be 1..4096, got {getattr(self, name)}")

    @property
    def kinesis_connections(self) -> int:
        """The Kinesis client's ``max_pool_connections``: one per fetch thread, and the coordinator's."""
        return self.fetch_threads + _SPARE_CONNECTIONS

    @property
    def dynamodb_connections(self) -> int:
        """The DynamoDB client's: one per processor thread (checkpoints), and the coordinator's (its hand-off
        writes included)."""
        return self.processor_threads + _SPARE_CONNECTIONS


_SPARE_CONNECTIONS = 12  # the coordinator and its 8 hand-off writers, the background lane, start-up checks


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
    health: HealthConfig = field(default_factory=HealthConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)

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
        """The spec of the stream called ``name``."""
        return next(s for s in self.streams if s.name == name)


# -- from the environment -------------------------------------------------------------------------------

_SECTIONS: dict[str, type] = {
    "lease": LeaseConfig,
    "retrieval": RetrievalConfig,
    "checkpoint": CheckpointConfig,
    "processing": ProcessingConfig,
    "shutdown": ShutdownConfig,
    "health": HealthConfig,
    "threads": ThreadsConfig,
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


def env_float(env: Mapping[str, str], key: str, default: float) -> float:
    """A finite number from ``env[key]`` (``default`` when unset or empty)."""
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(key, f"must be a number of seconds, got {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {raw!r}")
    return value


def env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(key, f"must be an integer, got {raw!r}") from None


def parse_timestamp(raw: str, name: str) -> datetime:
    """An ISO-8601 time with a time zone; ``name`` (variable or flag) is named in the error."""
    try:
        value = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise ConfigError(name, f"must be ISO-8601, e.g. 2024-05-01T12:00:00Z; got {raw!r}") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            name, f"{raw!r} has no time zone; add one, e.g. {raw.strip()}Z (UTC) or {raw.strip()}+02:00"
        )
    return value


def _for_operator(exc: ConfigError) -> ConfigError:
    """The same error, naming the variables the operator sets instead of the config fields."""
    message = str(exc)[len(exc.field) + 2 :]
    for var in sorted((v for v in ENV_VARS if "." in v.field), key=lambda v: -len(v.field)):
        message = message.replace(var.field, var.name)
    return ConfigError(variable_for(exc.field) or exc.field, message)


def _default(field: str) -> Any:
    return field_default(field)


def worker_config_from_env(
    env: Mapping[str, str],
    load_processor: Callable[[str], ProcessorFactory],
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
    load_processor: Callable[[str], ProcessorFactory],
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
            specs.append(StreamSpec(name.strip(), processor))
            continue
        if not path:
            raise ConfigError(
                "CONSUMER_PROCESSOR", f"no processor for stream {name!r} (set it, or {name}=pkg.mod:Class)"
            )
        setting = "CONSUMER_STREAMS" if item.partition("=")[2] else "CONSUMER_PROCESSOR"
        try:
            factory = load_processor(path.strip())
        except ProcessorLoadError as exc:
            raise ProcessorLoadError(f"{setting}: {exc}") from exc.__cause__
        specs.append(StreamSpec(name.strip(), factory))
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
            give_up_after=env_float(env, "CONSUMER_GIVE_UP_AFTER_SECONDS", 0.0) or None,
            forget_workers_after=env_float(env, "CONSUMER_FORGET_WORKERS_AFTER_SECONDS", 0.0) or None,
        ),
        retrieval=RetrievalConfig(
            mode=text("CONSUMER_RETRIEVAL", "retrieval.mode"),
            max_records=env_int(env, "CONSUMER_MAX_RECORDS", _default("retrieval.max_records")),
            idle_time_between_reads=f("CONSUMER_IDLE_TIME_SECONDS", "retrieval.idle_time_between_reads"),
            reads_per_second=f("CONSUMER_READS_PER_SECOND", "retrieval.reads_per_second"),
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
