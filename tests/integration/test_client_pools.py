"""Clients called from many processor threads at once, against the emulators over the network, each call
held 0.5 s on its way so that they all overlap: the raw S3 sink's own client (every shard's buffers written
together after an S3 outage) and ``consumer.aws.shared_client``, which processors use (the worker's dead-letter
queue client is sized from the processor pool: tests/unit/test_thread_settings.py). No connection is dropped
with urllib3's "Connection pool is full" warning, which a pool of 64 gave for every call past the 64th."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from consumer import aws
from consumer.settings.raw_sink import RawSinkConfig
from consumer.sinks import raw_writes
from consumer.sinks.raw_writes import own_client
from tools.tcp_proxy import FaultProxy, address

pytestmark = pytest.mark.integration

_AT_ONCE = 80  # more than botocore's default pool of 10 and the consumer's 64 before


def _raw_sink_puts(
    s3: Any, sqs: Any, unique_name: Any
) -> tuple[str, Callable[[int], None], Callable[[], int]]:
    bucket = unique_name("raw")
    s3.create_bucket(Bucket=bucket)
    client = own_client(RawSinkConfig(bucket=bucket, read_timeout=30.0))

    def call(n: int) -> None:
        client.put_object(Bucket=bucket, Key=f"raw/{n}.jsonl.gz", Body=b"x" * 1024)

    return "S3", call, lambda: int(s3.list_objects_v2(Bucket=bucket, Prefix="raw/")["KeyCount"])


def _shared_client_sends(
    s3: Any, sqs: Any, unique_name: Any
) -> tuple[str, Callable[[int], None], Callable[[], int]]:
    url = sqs.create_queue(QueueName=unique_name("dlq"))["QueueUrl"]

    def call(n: int) -> None:
        aws.shared_client("sqs").send_message(QueueUrl=url, MessageBody=str(n))

    def count() -> int:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
        return int(attributes["Attributes"]["ApproximateNumberOfMessages"])

    return "SQS", call, count


@pytest.mark.parametrize("prepare", [_raw_sink_puts, _shared_client_sends], ids=["raw-sink", "shared-client"])
def test_as_many_calls_at_once_as_processor_threads_drop_no_connection(
    prepare: Any,
    emulators: Any,
    s3_client: Any,
    sqs_client: Any,
    unique_name: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for key, value in emulators.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(raw_writes, "_clients", {})  # clients made for this test's endpoints
    monkeypatch.setattr(aws, "_shared", {})
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url())
        monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", proxy.url())
        service, call, count = prepare(s3_client, sqs_client, unique_name)
        proxy.hold(0.5)
        caplog.set_level(logging.WARNING, logger="urllib3")
        _at_once(call)
    assert count() == _AT_ONCE
    full = [r.getMessage() for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert not full, f"{service}: {len(full)} connections dropped, e.g. {full[0]}"


def _at_once(call: Callable[[int], None]) -> None:
    started = threading.Barrier(_AT_ONCE)
    failures: list[BaseException] = []

    def run(n: int) -> None:
        try:
            started.wait(timeout=30)
            call(n)
        except BaseException as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(_AT_ONCE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:3]
