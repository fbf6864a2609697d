"""The raw S3 sink's own client under many shards' PUTs at once (after an S3 outage every shard's buffers are
written together), against the emulators over the network, each PUT held 0.5 s on its way so that they all
overlap: no connection is dropped with urllib3's "Connection pool is full" warning, which a pool of 64 gave for
every PUT past the 64th."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from consumer.settings.raw_sink import RawSinkConfig
from consumer.sinks import raw_writes
from consumer.sinks.raw_writes import own_client
from tools.tcp_proxy import FaultProxy, address

pytestmark = pytest.mark.integration

_AT_ONCE = 80  # more than botocore's pools of 10 and the consumer's default of 64


def test_as_many_puts_at_once_as_processor_threads_drop_no_connection(
    emulators: Any,
    s3_client: Any,
    unique_name: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for key, value in emulators.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(raw_writes, "_clients", {})  # a client made for this test's endpoint and settings
    bucket = unique_name("raw")
    s3_client.create_bucket(Bucket=bucket)
    with FaultProxy(address(emulators.aws_endpoint)) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", proxy.url())
        proxy.hold(0.5)
        _put_at_once(own_client(RawSinkConfig(bucket=bucket, read_timeout=30.0)), bucket, caplog)
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix="raw/")
    assert listed["KeyCount"] == _AT_ONCE
    full = [r.getMessage() for r in caplog.records if "Connection pool is full" in r.getMessage()]
    assert not full, f"{len(full)} connections dropped, e.g. {full[0]}"


def _put_at_once(client: Any, bucket: str, caplog: pytest.LogCaptureFixture) -> None:
    started = threading.Barrier(_AT_ONCE)
    failures: list[BaseException] = []

    def put(n: int) -> None:
        try:
            started.wait(timeout=30)
            client.put_object(Bucket=bucket, Key=f"raw/{n}.jsonl.gz", Body=b"x" * 1024)
        except BaseException as exc:  # reported below, with the others
            failures.append(exc)

    caplog.set_level(logging.WARNING, logger="urllib3")
    threads = [threading.Thread(target=put, args=(n,)) for n in range(_AT_ONCE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures[:3]
