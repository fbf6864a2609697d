"""What happens to delivered records and to the worker around them: checkpoints, processor failures, the
graceful shutdown and the liveness file."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from consumer.errors import ConfigError
from consumer.settings.checks import check_types, choice, non_negative, positive

__all__ = ["CheckpointConfig", "HealthConfig", "ProcessingConfig", "ShutdownConfig"]


@dataclass(frozen=True)
class CheckpointConfig:
    """``auto`` checkpoints over each successful batch, writing at most once per ``auto_interval`` seconds
    (and at once at shutdown and at a hand-off); ``manual`` advances over records marked done."""

    mode: Literal["auto", "manual"] = "auto"
    flush_interval: float = 1.0
    # Auto mode: at most one checkpoint write per this many seconds (0: one per batch). A crash replays at
    # most this much more (or, while a process_records call runs past the interval, every batch finished
    # before it); a planned stop or hand-off writes the exact position whatever the interval.
    auto_interval: float = 1.0
    # Manual mode: records delivered and not yet done, per shard, past which fetching pauses (the memory
    # a processor that never marks a record done can hold). Keep it above a buffering sink's batch size.
    max_pending_records: int = 100_000

    def __post_init__(self) -> None:
        check_types("checkpoint", self)
        choice("checkpoint.mode", self.mode, ("auto", "manual"))
        positive("checkpoint.flush_interval", self.flush_interval)
        if self.max_pending_records < 1:
            raise ConfigError(
                "checkpoint.max_pending_records", f"must be >= 1, got {self.max_pending_records}"
            )
        non_negative("checkpoint.auto_interval", self.auto_interval)  # NaN would never write one


@dataclass(frozen=True)
class ProcessingConfig:
    """Processor failures: retried with backoff, then dead-lettered (``dlq``) or the shard halts (``halt``)."""

    max_attempts: int = 3
    backoff_base: float = 0.1
    backoff_max: float = 5.0
    on_failure: Literal["halt", "dlq"] = "halt"
    dlq_url: str | None = None

    def __post_init__(self) -> None:
        check_types("processing", self)
        if self.max_attempts < 1:
            raise ConfigError("processing.max_attempts", f"must be >= 1, got {self.max_attempts}")
        positive("processing.backoff_base", self.backoff_base)
        positive("processing.backoff_max", self.backoff_max)  # 0 or NaN: retried with no wait
        if self.backoff_max < self.backoff_base:
            raise ConfigError("processing.backoff_max", "must be >= processing.backoff_base")
        choice("processing.on_failure", self.on_failure, ("halt", "dlq"))
        if self.on_failure == "dlq" and not self.dlq_url:
            raise ConfigError("processing.dlq_url", "is required when processing.on_failure is dlq")


@dataclass(frozen=True)
class ShutdownConfig:
    """The whole graceful shutdown (drain, final checkpoints, hand-offs) fits inside ``deadline`` seconds."""

    deadline: float = 20.0
    final_checkpoint_timeout: float = 5.0

    def __post_init__(self) -> None:
        check_types("shutdown", self)
        positive("shutdown.deadline", self.deadline)
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
        check_types("health", self)
        positive("health.max_age", self.max_age)
