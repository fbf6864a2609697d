"""The limits proxy answers empty GetRecords at a shard's tip itself (docs/emulators.md), over real HTTP with
boto3 against kinesis-local: nothing put is ever missed, every answer has an iterator of its own (with its
own age), and the proxy the harness starts does it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tools.emulators import Emulators, client_kwargs
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits

pytestmark = pytest.mark.integration

SHARD = "shardId-000000000000"
ONE_ATTEMPT: dict[str, Any] = {"retries": {"mode": "standard", "max_attempts": 1}}


@pytest.fixture(scope="module")
def bare_kinesis_local() -> Iterator[tuple[str, int]]:
    """kinesis-local with no proxy in front, for this module's own proxies."""
    with Emulators(limits="off") as emulators:
        host, _, port = emulators.endpoints.kinesis_endpoint.removeprefix("http://").rpartition(":")
        yield host, int(port)


@pytest.fixture
def own_proxy(bare_kinesis_local: tuple[str, int]) -> Iterator[Any]:
    """``start(limits) -> (proxy, client)``: a proxy of the test's own, with the tip cache on, in front of a
    kinesis-local no other proxy writes to (every put and read of the test goes through it)."""
    proxies: list[KinesisLimitsProxy] = []

    def start(limits: Limits) -> tuple[KinesisLimitsProxy, Any]:
        proxy = KinesisLimitsProxy(bare_kinesis_local, limits, tip_seconds=60).start()
        proxies.append(proxy)
        return proxy, boto3.client("kinesis", **client_kwargs(proxy.url(), **ONE_ATTEMPT))

    yield start
    for proxy in proxies:
        proxy.stop()


def _stream(kinesis: Any) -> str:
    name = f"tip-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})
    return name


def _latest(kinesis: Any, stream: str) -> str:
    answer = kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="LATEST")
    return str(answer["ShardIterator"])


def test_every_record_put_while_a_reader_polls_the_tip_is_read_once_in_order(own_proxy: Any) -> None:
    # No GetRecords rate limit, so that the reader polls as fast as it can while the writer puts one record
    # (or a batch) at a time: a repeated empty answer that hid a record would lose it for good.
    proxy, kinesis = own_proxy(Limits(get_records_per_shard=None, get_shard_iterator_per_shard=None))
    stream = _stream(kinesis)
    iterator = _latest(kinesis, stream)
    sent: list[bytes] = []
    done = threading.Event()

    def write() -> None:
        pause = threading.Event()
        for i in range(60):
            if i % 3 == 2:
                batch = [{"Data": f"{i}-{j}".encode(), "PartitionKey": "k"} for j in range(3)]
                assert kinesis.put_records(StreamName=stream, Records=batch)["FailedRecordCount"] == 0
                sent.extend(r["Data"] for r in batch)
            else:
                kinesis.put_record(StreamName=stream, Data=f"{i}".encode(), PartitionKey="k")
                sent.append(f"{i}".encode())
            pause.wait(0.02)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    read: list[bytes] = []
    iterators: set[str] = set()
    deadline = time.monotonic() + 60
    while not (done.is_set() and len(read) >= len(sent)) and time.monotonic() < deadline:
        answer = kinesis.get_records(ShardIterator=iterator)
        read += [r["Data"] for r in answer["Records"]]
        iterator = answer["NextShardIterator"]
        assert iterator not in iterators  # every answer hands out an iterator of its own
        iterators.add(iterator)
    writer.join()
    assert read == sent
    assert proxy.tips.hits > 0 and proxy.tips.misses > 0


def test_each_repeated_answer_starts_its_iterators_life_afresh(own_proxy: Any) -> None:
    # Iterators live 1 s here: a reader that polls the tip every 0.3 s for 3 s never holds one too long,
    # though the proxy answers it from the same kinesis-local iterator all along; one held 1.5 s expires.
    proxy, kinesis = own_proxy(Limits(iterator_ttl_seconds=1.0, get_records_per_shard=None))
    stream = _stream(kinesis)
    iterator = _latest(kinesis, stream)
    pause = threading.Event()
    for _ in range(10):
        iterator = kinesis.get_records(ShardIterator=iterator)["NextShardIterator"]
        pause.wait(0.3)
    assert proxy.tips.hits >= 8
    pause.wait(1.5)  # the iterator's own age, not the first one's, is what counts
    with pytest.raises(ClientError) as raised:
        kinesis.get_records(ShardIterator=iterator)
    assert raised.value.response["Error"]["Code"] == "ExpiredIteratorException"


def test_a_put_through_the_proxy_is_read_at_once_from_a_repeated_iterator(own_proxy: Any) -> None:
    proxy, kinesis = own_proxy(Limits(get_records_per_shard=None))
    stream = _stream(kinesis)
    iterator = _latest(kinesis, stream)
    for _ in range(3):
        iterator = kinesis.get_records(ShardIterator=iterator)["NextShardIterator"]
    assert proxy.tips.hits >= 2 and iterator.startswith("tip-")
    kinesis.put_record(StreamName=stream, Data=b"new", PartitionKey="k")
    answer = kinesis.get_records(ShardIterator=iterator)
    assert [r["Data"] for r in answer["Records"]] == [b"new"]
    # Limits switched off while a client holds an alias: the alias still stands for its iterator.
    for _ in range(2):
        iterator = kinesis.get_records(ShardIterator=answer["NextShardIterator"])["NextShardIterator"]
        answer = {"NextShardIterator": iterator}
    proxy.set_limits(Limits(enabled=False))
    kinesis.put_record(StreamName=stream, Data=b"after", PartitionKey="k")
    assert [r["Data"] for r in kinesis.get_records(ShardIterator=iterator)["Records"]] == [b"after"]


def test_the_harness_proxy_repeats_empty_answers_at_the_tip(kinesis_client: Any) -> None:
    stream = _stream(kinesis_client)
    iterator = _latest(kinesis_client, stream)
    pause = threading.Event()
    handed_out = []
    for _ in range(3):
        iterator = kinesis_client.get_records(ShardIterator=iterator)["NextShardIterator"]
        handed_out.append(iterator)
        pause.wait(0.25)  # within AWS's five calls a second per shard
    assert handed_out[-1].startswith("tip-")
    kinesis_client.put_record(StreamName=stream, Data=b"x", PartitionKey="k")
    assert [r["Data"] for r in kinesis_client.get_records(ShardIterator=iterator)["Records"]] == [b"x"]
