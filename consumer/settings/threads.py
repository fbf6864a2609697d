"""The worker's shard runner: how many threads fetch and how many run processors, and the connection pools
that follow from them."""

from __future__ import annotations

from dataclasses import dataclass

from consumer.errors import ConfigError

__all__ = ["ThreadsConfig"]


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
