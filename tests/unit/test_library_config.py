"""A typed config written by hand: each wrong value is one ``ConfigError`` naming the field, at construction
(not a ``TypeError`` or ``AttributeError`` from deep inside the worker once it runs)."""

from __future__ import annotations

from typing import Any

import pytest

from consumer import (
    BaseProcessor,
    ConfigError,
    LeaseConfig,
    ProcessRecordsInput,
    RetrievalConfig,
    ShutdownConfig,
    StreamSpec,
    ThreadsConfig,
    WorkerConfig,
)


class Orders(BaseProcessor):
    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


def config(**changes: Any) -> WorkerConfig:
    fields: dict[str, Any] = {
        "application": "orders",
        "lease_table": "orders-leases",
        "checkpoint_table": "orders-checkpoints",
        "streams": (StreamSpec("orders", Orders),),
    }
    return WorkerConfig(**{**fields, **changes})


@pytest.mark.parametrize(
    ("factory", "words"),
    [
        (Orders(), "got a 'Orders' instance, not a class or factory: pass the class Orders"),
        ("mypkg.orders:Orders", "got the string 'mypkg.orders:Orders': give the class itself"),
        (42, "got a 'int' instance, not a class or factory"),
    ],
)
def test_a_processor_that_is_not_a_class_or_factory_is_refused_naming_the_field(
    factory: object, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        StreamSpec("orders", factory)  # type: ignore[arg-type]
    assert caught.value.field == "StreamSpec.processor_factory (stream 'orders')"
    assert words in str(caught.value)


def test_factories_and_processor_classes_are_accepted() -> None:
    assert StreamSpec("orders", Orders).processor_factory is Orders
    StreamSpec("orders", lambda: Orders(**{}))  # a function making one per shard
    StreamSpec("orders.v2_eu-west-1", Orders)


@pytest.mark.parametrize("name", ["", "orders and returns", "orders/eu", "x" * 129, 7])
def test_a_stream_name_kinesis_would_refuse_is_refused_naming_streams(name: object) -> None:
    with pytest.raises(ConfigError, match=r"^streams: stream name must be 1\.\.128 characters of a-z"):
        StreamSpec(name, Orders)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"streams": "orders"}, "streams: must be a tuple of StreamSpec, got str"),
        ({"streams": StreamSpec("orders", Orders)}, "streams: must be a tuple of StreamSpec, got StreamSpec"),
        ({"streams": ("orders",)}, "streams[0]: must be a StreamSpec, got str"),
        ({"lease": {"lease_duration": 5}}, "lease: must be a LeaseConfig, got dict"),
        ({"lease": RetrievalConfig()}, "lease: must be a LeaseConfig, got RetrievalConfig"),
        ({"retrieval": LeaseConfig()}, "retrieval: must be a RetrievalConfig, got LeaseConfig"),
        ({"application": "  "}, "application: must not be empty"),
        ({"worker_id": " "}, "worker_id: must not be empty"),
        ({"lease_table": None}, "lease_table: must be a string, got NoneType"),
    ],
)
def test_wrong_values_in_worker_config_name_the_field(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(**changes)
    assert str(caught.value) == message


def test_a_list_of_streams_is_kept_as_a_tuple() -> None:
    made = config(streams=[StreamSpec("orders", Orders), StreamSpec("returns", Orders)])
    assert made.streams == (StreamSpec("orders", Orders), StreamSpec("returns", Orders))
    hash(made.streams)  # a frozen config stays hashable


class Buffering(BaseProcessor):
    checkpoint_mode = "Manual"  # a typo: without the check, every batch is checkpointed when it returns

    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


class ManualOrders(Orders):
    checkpoint_mode = "manual"


def test_a_processor_class_declaring_an_unknown_checkpoint_mode_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        StreamSpec("orders", Buffering)
    assert str(caught.value) == (
        "Buffering.checkpoint_mode (stream 'orders'): must be one of auto, manual, explicit; got 'Manual'"
    )
    assert StreamSpec("orders", ManualOrders).processor_factory is ManualOrders


def test_a_factory_making_a_processor_with_an_unknown_checkpoint_mode_is_refused_by_the_start_up_checks() -> (
    None
):
    """A factory function is not a class, so ``StreamSpec`` cannot see the mode; the start-up checks make the
    processor once and refuse it, naming the stream (before, it ran in auto mode)."""
    from consumer import ProcessorLoadError, WorkerConfig
    from consumer.preflight import _construct

    def make() -> Buffering:
        return Buffering()

    config = WorkerConfig(
        application="orders",
        lease_table="orders-leases",
        checkpoint_table="orders-checkpoints",
        streams=(StreamSpec("orders", make),),
    )
    with pytest.raises(
        ProcessorLoadError,
        match=r"Buffering.checkpoint_mode must be one of auto, manual, explicit; got 'Manual'",
    ):
        _construct(config, {})


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: LeaseConfig(lease_duration="10"), "lease.lease_duration: must be a number, got str '10'"),
        (lambda: LeaseConfig(lease_duration=True), "lease.lease_duration: must be a number, got bool True"),
        (
            lambda: LeaseConfig(give_up_after="30"),
            "lease.give_up_after: must be a number or None, got str '30'",
        ),
        (
            lambda: RetrievalConfig(max_records=10.5),
            "retrieval.max_records: must be an integer, got float 10.5",
        ),
        (
            lambda: RetrievalConfig(mode="Polling"),
            "retrieval.mode: must be one of polling, fanout; got 'Polling'",
        ),
        (
            lambda: ThreadsConfig(fetch_threads=None),
            "threads.fetch_threads: must be an integer, got NoneType None",
        ),
        (lambda: ShutdownConfig(deadline="20"), "shutdown.deadline: must be a number, got str '20'"),
    ],
)
def test_a_setting_of_the_wrong_type_is_one_error_naming_it(make: Any, message: str) -> None:
    """Before: a ``TypeError`` from a comparison deep in a check ("'>' not supported..."), or ``True`` taken
    as 1 second."""
    with pytest.raises(ConfigError) as caught:
        make()
    assert str(caught.value) == message


def test_ints_are_numbers() -> None:
    assert LeaseConfig(lease_duration=12, safety_margin=3).lease_duration == 12
