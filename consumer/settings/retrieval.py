"""How records are fetched: polling GetRecords or enhanced fan-out, paced within AWS's per-shard limits."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from consumer.errors import ConfigError
from consumer.settings.checks import check_types, choice, non_negative, positive

__all__ = ["InitialPosition", "RetrievalConfig"]

InitialPosition = Literal["TRIM_HORIZON", "LATEST", "AT_TIMESTAMP"]


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
        check_types("retrieval", self)
        choice("retrieval.mode", self.mode, ("polling", "fanout"))
        if not 1 <= self.max_records <= 10000:
            raise ConfigError("retrieval.max_records", f"must be 1..10000, got {self.max_records}")
        non_negative("retrieval.idle_time_between_reads", self.idle_time_between_reads)
        choice(
            "retrieval.initial_position", self.initial_position, ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
        )
        if (self.initial_position == "AT_TIMESTAMP") != (self.initial_timestamp is not None):
            raise ConfigError(
                "retrieval.initial_timestamp",
                "is required with retrieval.initial_position AT_TIMESTAMP and only allowed with it",
            )
        positive("retrieval.reads_per_second", self.reads_per_second)
        positive("retrieval.read_bytes_per_second", self.read_bytes_per_second)
        non_negative("retrieval.fanout_subscribe_interval", self.fanout_subscribe_interval)
        positive("retrieval.backoff_base", self.backoff_base)
        positive("retrieval.backoff_max", self.backoff_max)
        if self.backoff_max < self.backoff_base:
            raise ConfigError("retrieval.backoff_max", "must be >= retrieval.backoff_base")
        if self.mode == "fanout" and not self.fanout_consumer_name:
            raise ConfigError("retrieval.fanout_consumer_name", "is required when retrieval.mode is fanout")
        if not 0 <= self.prefetch_batches <= 16:
            raise ConfigError("retrieval.prefetch_batches", f"must be 0..16, got {self.prefetch_batches}")
