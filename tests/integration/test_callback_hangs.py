"""Processor callbacks other than ``process_records``, over the emulators.

- An ``initialize`` that does not return holds its shard (nothing is read) while the heartbeats go on: an
  embedded worker logs it once as ``processor_call_slow``, naming the callback and the stack it is stuck in,
  and counts it in the ``ProcessorCallsSlow`` gauge; released, the shard starts and reads.
- ``python -m consumer run`` refuses a processor whose callbacks are generator functions (they would run
  none of their body while their records were checkpointed): exit 2, one line naming the setting, the class
  and the callback, no traceback, and nothing taken in the lease table.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from consumer import create_worker
from consumer.config import RetrievalConfig, ShutdownConfig, StreamSpec, WorkerConfig
from consumer.lifecycle.async_processor import AsyncBaseProcessor
from consumer.lifecycle.processor import BaseProcessor, InitializationInput, ProcessRecordsInput
from consumer.metrics.sink import InMemoryMetrics

from .support import LEASES, REPO, create_stream, make_names, put_records, wait_until

pytestmark = pytest.mark.integration

RELEASE = threading.Event()  # lets the hung initialize return
DELIVERED: list[bytes] = []


def wait_for_release() -> None:
    """Where the stack of the hung call shows it is stuck."""
    RELEASE.wait(30)


class HangsInInitialize(BaseProcessor):
    def initialize(self, data: InitializationInput) -> None:
        wait_for_release()

    def process_records(self, data: ProcessRecordsInput) -> None:
        DELIVERED.extend(r.data for r in data.records)


class Gauges(InMemoryMetrics):
    """In-memory metrics that also keep each metric's latest value (``ProcessorCallsSlow`` is a gauge)."""

    def __init__(self) -> None:
        super().__init__()
        self.latest: dict[tuple[str, str, str | None], float] = {}

    def add(self, name: str, value: float, stream: str, shard: str | None = None) -> None:
        super().add(name, value, stream, shard)
        self.latest[(name, stream, shard)] = value


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [r.__dict__ for r in list(caplog.records) if getattr(r, "event", None) == event]


def test_a_hung_initialize_is_named_by_processor_call_slow(
    emulators, kinesis_client, dynamodb_client, unique_name, caplog
) -> None:
    caplog.set_level(logging.INFO)
    RELEASE.clear()
    DELIVERED.clear()
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    credentials = emulators.env()
    session = boto3.Session(
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
    )
    config = WorkerConfig(
        application="callback-hangs",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        worker_id="w1",
        streams=(StreamSpec(names.stream, HangsInInitialize),),
        lease=LEASES,  # 3 s: the bound past which a call is slow
        retrieval=RetrievalConfig(idle_time_between_reads=0.05),
        shutdown=ShutdownConfig(deadline=5.0, final_checkpoint_timeout=2.0),
    )
    metrics = Gauges()
    worker = create_worker(
        config,
        session=session,
        region=emulators.region,
        endpoints={"kinesis": emulators.kinesis_endpoint, "dynamodb": emulators.aws_endpoint},
        endpoint_url=emulators.aws_endpoint,
        metrics=metrics,
        metrics_interval=0.25,
    )
    gauge = ("ProcessorCallsSlow", names.stream, None)
    worker.start()
    try:
        wait_until(
            lambda: bool(_events(caplog, "processor_call_slow")),
            timeout=4 * LEASES.lease_duration + 10,
            what="the hung initialize told",
        )
        assert metrics.latest.get(gauge) == 1
        assert _events(caplog, "shard_started") == []  # still in initialize
        RELEASE.set()
        wait_until(lambda: bool(_events(caplog, "shard_started")), timeout=10, what="the shard started")
        put_records(kinesis_client, names.stream, [b"r0"])
        wait_until(lambda: DELIVERED == [b"r0"], timeout=20, what="r0 delivered once released")
        wait_until(lambda: metrics.latest.get(gauge) == 0, timeout=10, what="the gauge back to 0")
    finally:
        RELEASE.set()
        worker.stop(15)
    [told] = _events(caplog, "processor_call_slow")
    assert told["levelname"] == "WARNING" and told["callback"] == "initialize"
    assert told["stream"] == names.stream and told["shard"] == "shardId-000000000000"
    assert told["running_s"] >= LEASES.lease_duration
    assert told["hint"].startswith("initialize has not returned")
    assert "wait_for_release" in told["stack"]


# -- the start-up checks of `run` ------------------------------------------------------------------------


class GeneratorRecords(BaseProcessor):
    def process_records(self, data: ProcessRecordsInput) -> Iterator[None]:
        yield None


class AsyncGeneratorInit(AsyncBaseProcessor):
    async def initialize(self, data: InitializationInput) -> AsyncIterator[None]:  # type: ignore[override]
        yield None

    async def process_records(self, data: ProcessRecordsInput) -> None:
        return None


def make_async_generator_init() -> AsyncGeneratorInit:
    """A factory function: what it makes is checked when the start-up checks construct it."""
    return AsyncGeneratorInit()


def test_run_refuses_generator_callbacks_in_one_line(
    emulators, kinesis_client, dynamodb_client, unique_name
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    base = {
        **os.environ,
        **emulators.env(),
        "CONSUMER_APPLICATION": "callback-hangs",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    here = "tests.integration.test_callback_hangs"
    cases = [
        (
            {"CONSUMER_PROCESSOR": f"{here}:GeneratorRecords"},
            ("CONSUMER_PROCESSOR", "GeneratorRecords.process_records is a generator function"),
        ),
        (
            {"CONSUMER_STREAMS": f"{names.stream}={here}:make_async_generator_init"},
            ("CONSUMER_STREAMS", "AsyncGeneratorInit.initialize is a generator function"),
        ),
    ]

    def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "consumer", "run"],
            cwd=REPO,
            env={**base, **env},
            capture_output=True,
            text=True,
            timeout=60,  # before the fix the worker ran: it never ended by itself
            check=False,
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, [env for env, _ in cases]))
    for (_, needles), out in zip(cases, results, strict=True):
        errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        assert len(errors) == 1 and all(n in errors[0] for n in needles), out.stderr[-2000:]
    # Refused before the worker registered or took anything.
    assert dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"] == []
