"""The worker's shard runner: how many threads fetch and how many run processors, and the connection pools
that follow from them."""

from __future__ import annotations

from dataclasses import dataclass

from consumer.errors import ConfigError
from consumer.settings.checks import check_types

__all__ = ["FANOUT_SUBSCRIPTIONS", "MAX_THREADS", "ThreadsConfig"]


@dataclass(frozen=True)
class ThreadsConfig:
    """The worker's shard runner: two bounded pools, each growing a thread at a time as the work needs it.

    ``fetch_threads`` run GetRecords for every shard (fan-out: a thread per subscribed shard, whatever this
    says, since a subscription holds its thread while it waits for its next event); ``processor_threads``
    run the processors' calls and the checkpoint writes, one at a time per shard. A processor that blocks
    holds one processor thread: past ``processor_threads`` blocked shards, the others' batches wait (their
    fetches, the heartbeats and the coordinator never do). The clients' connection pools follow: Kinesis
    ``kinesis_connections``, DynamoDB ``dynamodb_connections``, so a pool thread never waits for a connection.
    """

    fetch_threads: int = 32
    processor_threads: int = 256  # a thread per shard up to here, as before for realistic shard counts

    def __post_init__(self) -> None:
        check_types("threads", self)
        for name in ("fetch_threads", "processor_threads"):
            if not 1 <= getattr(self, name) <= MAX_THREADS:
                raise ConfigError(f"threads.{name}", f"must be 1..{MAX_THREADS}, got {getattr(self, name)}")

    def fetch_limit(self, fanout: bool) -> int:
        """The fetch pool's bound: ``fetch_threads`` when polling; with fan-out, as many as a worker can own
        (threads start only as subscriptions wait for them)."""
        return max(self.fetch_threads, FANOUT_SUBSCRIPTIONS) if fanout else self.fetch_threads

    def kinesis_connections(self, fanout: bool) -> int:
        """The Kinesis client's ``max_pool_connections``: one per fetch thread (opened only when used), and the
        coordinator's."""
        return self.fetch_limit(fanout) + _SPARE_CONNECTIONS

    @property
    def dynamodb_connections(self) -> int:
        """The DynamoDB client's: one per processor thread (checkpoints), and the coordinator's (its hand-off
        writes included)."""
        return self.processor_threads + _SPARE_CONNECTIONS


#: The most threads either pool may be given.
MAX_THREADS = 4096
# Fan-out subscriptions one worker may hold at once, each on a thread and a connection of its own.
FANOUT_SUBSCRIPTIONS = 4096
_SPARE_CONNECTIONS = 12  # the coordinator and its 8 hand-off writers, the background lane, start-up checks
