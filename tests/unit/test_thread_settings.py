"""The thread settings: validated with errors that name them, and the clients' connection pools follow them."""

from __future__ import annotations

import pytest

from consumer.config import (
    ConfigError,
    ProcessingConfig,
    RetrievalConfig,
    StreamSpec,
    ThreadsConfig,
    WorkerConfig,
    worker_config_from_env,
)
from consumer.embed import create_worker
from consumer.examples.logging_processor import LoggingProcessor
from consumer.settings.threads import FANOUT_SUBSCRIPTIONS


@pytest.mark.parametrize("field", ["fetch_threads", "processor_threads"])
def test_pool_sizes_are_checked_and_named(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"threads\.{field}"):
        ThreadsConfig(**{field: 0})


def test_the_environment_sets_them() -> None:
    env = {
        "CONSUMER_APPLICATION": "a",
        "CONSUMER_STREAMS": "s",
        "CONSUMER_PROCESSOR": "pkg.mod:Processor",
        "CONSUMER_LEASE_TABLE": "l",
        "CONSUMER_CHECKPOINT_TABLE": "c",
        "CONSUMER_FETCH_THREADS": "8",
        "CONSUMER_PROCESSOR_THREADS": "20",
    }
    config = worker_config_from_env(env, lambda _path, _env: LoggingProcessor, processor=None)
    assert config.threads == ThreadsConfig(8, 20)
    with pytest.raises(ConfigError, match="CONSUMER_FETCH_THREADS"):
        worker_config_from_env({**env, "CONSUMER_FETCH_THREADS": "0"}, lambda _path, _env: LoggingProcessor)


def test_the_kinesis_dynamodb_and_dead_letter_connection_pools_fit_the_thread_pools_they_serve() -> None:
    config = WorkerConfig(
        application="a",
        lease_table="l",
        checkpoint_table="c",
        streams=(StreamSpec("s", LoggingProcessor),),
        processing=ProcessingConfig(on_failure="dlq", dlq_url="http://127.0.0.1:9/123456789012/dlq"),
        threads=ThreadsConfig(fetch_threads=100, processor_threads=300),
    )
    worker = create_worker(config, endpoint_url="http://127.0.0.1:9", region="us-east-1", checks=False)
    kinesis = worker._kinesis._c  # type: ignore[attr-defined]
    dynamodb = worker._repo._c  # type: ignore[attr-defined]
    assert kinesis.meta.config.max_pool_connections >= 100
    assert dynamodb.meta.config.max_pool_connections >= 300
    assert kinesis.meta.config.max_pool_connections == config.threads.kinesis_connections(fanout=False)
    dead_letters = worker._ctx.dlq._c  # type: ignore[union-attr]  # sent from the processor threads
    assert dead_letters.meta.config.max_pool_connections == 300


def test_with_fan_out_the_fetch_pool_and_kinesis_connections_follow_the_subscriptions_not_fetch_threads() -> (
    None
):
    """A subscription holds its thread and its connection while it waits for its next event (AWS sends one at
    least every 5 s): a bound below the shards a worker owns would leave the others unread meanwhile."""
    threads = ThreadsConfig(fetch_threads=4)
    assert threads.fetch_limit(fanout=False) == 4
    assert threads.fetch_limit(fanout=True) == FANOUT_SUBSCRIPTIONS
    assert threads.kinesis_connections(fanout=True) > FANOUT_SUBSCRIPTIONS
    config = WorkerConfig(
        application="a",
        lease_table="l",
        checkpoint_table="c",
        streams=(StreamSpec("s", LoggingProcessor),),
        retrieval=RetrievalConfig(mode="fanout", fanout_consumer_name="efo"),
        threads=threads,
    )
    worker = create_worker(config, endpoint_url="http://127.0.0.1:9", region="us-east-1", checks=False)
    kinesis = worker._kinesis._c  # type: ignore[attr-defined]
    assert kinesis.meta.config.max_pool_connections == threads.kinesis_connections(fanout=True)
