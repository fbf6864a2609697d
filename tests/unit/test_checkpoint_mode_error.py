"""A processor whose instances declare an unknown ``checkpoint_mode`` (set in ``__init__``: the
``StreamSpec`` check reads the class, and a ``Worker`` built directly runs no start-up checks): the shard's error names the
user's class, the setting and the stream, not the adapter the worker puts in front of it."""

from __future__ import annotations

import logging

import pytest

from consumer.errors import ConfigError
from consumer.leases.memory import InMemoryTables
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.processor import BaseProcessor, ProcessRecordsInput
from consumer.retrieval.memory import InMemoryKinesis

from .helpers import Journal, make_worker, start, wait_until


class OrdersAsync(AsyncBaseProcessor):
    def __init__(self) -> None:
        self.checkpoint_mode = "Manual"  # a typo: would otherwise run as auto, records not done included

    async def process_records(self, data: ProcessRecordsInput) -> None:
        return None


class OrdersSync(BaseProcessor):
    def __init__(self) -> None:
        self.checkpoint_mode = "Manual"

    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


@pytest.mark.parametrize("processor", [OrdersAsync, OrdersSync])
def test_an_unknown_checkpoint_mode_is_named_on_the_users_class(
    processor: type, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    tables, kinesis = InMemoryTables(), InMemoryKinesis()
    kinesis.create_stream("orders", 1)

    def failures() -> list[BaseException]:
        return [
            r.exc_info[1]
            for r in caplog.records
            if getattr(r, "event", None) == "shard_failed" and r.exc_info and r.exc_info[1] is not None
        ]

    worker = make_worker("w1", tables, kinesis, Journal(), streams=("orders",), processor=processor)
    t = start(worker)
    try:
        wait_until(lambda: failures() != [], what="the shard's failure")
    finally:
        worker.request_shutdown()
        t.join(10)
    error = failures()[0]
    assert isinstance(error, ConfigError)
    assert error.field == f"{processor.__name__}.checkpoint_mode (stream 'orders')"
    assert str(error).endswith("must be one of auto, manual, explicit; got 'Manual'")
