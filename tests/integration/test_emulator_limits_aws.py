"""The limits layer against AWS's documented answers, over HTTP with boto3 (docs/emulators.md): SubscribeToShard's
5-second rule and takeover, a throttled transaction's reason per capacity mode, GetRecords calls refused for a
big read taking no place in the 5-per-second window, rates below one per window, partition keys sized in bytes.

One emulator set of this module's own (small DynamoDB limits); Kinesis rates that need other values get a
``KinesisLimitsProxy`` of the test's own in front of its kinesis-local. Clients make one attempt, so botocore's
retries never hide an answer; every wait is on an answer, never a fixed sleep.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from tools.emulators import Emulators, client_kwargs
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.tcp_proxy import FaultProxy

from .test_emulator_limits import _table as limits_table

pytestmark = pytest.mark.integration

ONE_ATTEMPT: dict[str, Any] = {"retries": {"mode": "standard", "max_attempts": 1}}
SHARD = "shardId-000000000000"


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulators]:
    with Emulators(limits={"dynamodb_partition_wcu": 1, "dynamodb_burst_seconds": 1}) as emulators:
        yield emulators


@pytest.fixture
def kinesis(emu: Emulators) -> Any:
    return emu.endpoints.client("kinesis", **ONE_ATTEMPT)


def _error(call: Callable[[], Any]) -> dict[str, Any] | None:
    """The error response of ``call()`` (``Error``, ``ResponseMetadata``, ...), None if it succeeded."""
    try:
        call()
    except ClientError as exc:
        return dict(exc.response)
    return None


def _stream(kinesis: Any) -> str:
    name = f"audit-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})
    return name


def _proxy(emu: Emulators, limits: Limits) -> KinesisLimitsProxy:
    host, _, port = emu.kinesis_upstream.removeprefix("http://").rpartition(":")
    return KinesisLimitsProxy((host, int(port)), limits)


def _first_success(call: Callable[[], Any], codes: set[str], pause: float, timeout: float = 20.0) -> float:
    """Call until it succeeds, each refusal one of ``codes``; the monotonic time of the success."""
    deadline, waiter = time.monotonic() + timeout, threading.Event()
    while (error := _error(call)) is not None:
        assert error["Error"]["Code"] in codes, error["Error"]
        assert time.monotonic() < deadline, f"still refused after {timeout} s"
        waiter.wait(pause)
    return time.monotonic()


# --------------------------------------------------------------------------------------- SubscribeToShard


def test_subscribe_again_within_5_s_is_resource_in_use_and_later_takes_over(
    emu: Emulators, kinesis: Any
) -> None:
    stream = _stream(kinesis)
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="audit")["Consumer"]
    port = int(emu.endpoints.kinesis_endpoint.rsplit(":", 1)[1])
    with FaultProxy(("127.0.0.1", port), eventstream=True) as shim:

        def subscribe() -> Any:
            client = boto3.client("kinesis", **client_kwargs(shim.url(), **ONE_ATTEMPT))
            return client.subscribe_to_shard(
                ConsumerARN=consumer["ConsumerARN"], ShardId=SHARD, StartingPosition={"Type": "LATEST"}
            )

        first = _first_success_value(subscribe)
        began = time.monotonic()
        events: list[str] = []
        reader = threading.Thread(target=lambda: events.extend(e for ev in first["EventStream"] for e in ev))
        reader.start()
        # AWS: again within 5 s of a successful call -> ResourceInUseException, as the call's own HTTP 400
        # (kinesis-local alone answered 200 and refused inside the event stream).
        refused: dict[str, Any] | None = None
        while refused is None or refused["Error"]["Code"] == "LimitExceededException":  # 1 call/s first
            threading.Event().wait(0.3)
            refused = _error(subscribe)
            assert refused is not None
        assert time.monotonic() - began < 5.0
        assert refused["Error"]["Code"] == "ResourceInUseException"
        assert refused["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert refused["Error"]["Message"].startswith("Another active subscription exists for this consumer:")
        assert f":{stream}:{SHARD}:audit" in refused["Error"]["Message"]
        # 5 s or more after it: the new call takes over (kinesis-local refused while the first was open), and
        # the first subscription ends.
        holder: dict[str, Any] = {}
        took_over = _first_success(
            lambda: holder.update(answer=subscribe()),
            {"ResourceInUseException", "LimitExceededException"},
            pause=0.5,
        )
        assert took_over - began >= 5.0
        second = iter(holder["answer"]["EventStream"])
        assert "SubscribeToShardEvent" in next(second)  # a real subscription, not an in-stream refusal
        reader.join(timeout=10)
        assert not reader.is_alive(), "the taken-over subscription did not end"
        assert set(events) <= {"SubscribeToShardEvent"}
        holder["answer"]["EventStream"].close()


def _first_success_value(call: Callable[[], Any]) -> Any:
    holder: dict[str, Any] = {}
    _first_success(lambda: holder.update(answer=call()), {"ResourceInUseException"}, pause=0.5)
    return holder["answer"]


# ------------------------------------------------------------------------------------------- DynamoDB


def _table(dynamodb: Any, provisioned: bool) -> str:
    return limits_table(dynamodb, provisioned, name=f"audit-{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize(
    ("provisioned", "code", "message"),
    [
        (
            True,
            "ProvisionedThroughputExceeded",
            "The level of configured provisioned throughput for the table",
        ),
        (False, "ThrottlingError", "Throughput exceeds the current capacity of your table or index"),
    ],
)
def test_throttled_transaction_reason_follows_the_capacity_mode(
    emu: Emulators, provisioned: bool, code: str, message: str
) -> None:
    dynamodb = emu.endpoints.client("dynamodb", **ONE_ATTEMPT)
    table = _table(dynamodb, provisioned)

    def transact() -> (
        Any
    ):  # 2 WCU on one key: over 1 WCU per key (and 1 WCU of table) once the burst is spent
        return dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": "hot"}}}}]
        )

    deadline = time.monotonic() + 20
    while (error := _error(transact)) is None:
        assert time.monotonic() < deadline, "never throttled"
    assert error["Error"]["Code"] == "TransactionCanceledException"
    [reason] = error["CancellationReasons"]
    assert reason["Code"] == code
    assert reason["Message"].startswith(message)


# -------------------------------------------------------------------------------- Kinesis rate details


def test_get_records_refused_for_a_big_read_take_no_place_in_the_call_window(emu: Emulators) -> None:
    # 2 calls per 10 s and 100 KB/s: a 150 KB read leaves 1.5 s of debt. Calls refused for that debt must not
    # fill the window, so the first call after it is served (it was refused until 10 s had passed).
    limits = Limits(get_records_per_shard=0.2, window_seconds=10, get_records_bytes_per_shard=100_000)
    with _proxy(emu, limits) as proxy:
        kinesis = boto3.client("kinesis", **client_kwargs(proxy.url(), **ONE_ATTEMPT))
        stream = _stream(kinesis)
        kinesis.put_record(StreamName=stream, Data=b"x" * 150_000, PartitionKey="k")
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON"
        )
        first = kinesis.get_records(ShardIterator=iterator["ShardIterator"])
        began = time.monotonic()
        assert len(first["Records"]) == 1
        served = _first_success(
            lambda: kinesis.get_records(ShardIterator=first["NextShardIterator"]),
            {"ProvisionedThroughputExceededException"},
            pause=0.2,
        )
        assert 1.0 < served - began < 6.0


def test_rates_below_one_per_window_are_kept(emu: Emulators) -> None:
    # 0.5 GetShardIterator and 0.5 records a second: one call / record per 2 s, neither 1 per second
    # (a window of 1 s held one call) nor none at all (a bucket of half a record never held one).
    limits = Limits(get_shard_iterator_per_shard=0.5, put_records_per_shard=0.5)
    with _proxy(emu, limits) as proxy:
        kinesis = boto3.client("kinesis", **client_kwargs(proxy.url(), **ONE_ATTEMPT))
        stream = _stream(kinesis)

        def get() -> Any:
            return kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="LATEST")

        throttled = {"ProvisionedThroughputExceededException"}
        began = _first_success(get, throttled, pause=0.2)
        assert _first_success(get, throttled, pause=0.2) - began > 1.8

        def put() -> Any:
            return kinesis.put_record(StreamName=stream, Data=b"r", PartitionKey="k")

        began = _first_success(put, throttled, pause=0.2)
        assert _error(put) is not None
        assert _first_success(put, throttled, pause=0.2) - began > 1.5


def test_partition_key_counts_its_utf8_bytes(emu: Emulators) -> None:
    # 2 bytes/s with 50 s of bucket (100 bytes). 40 bytes of data + 20 "é" (40 bytes, 20 characters) = 80
    # bytes; then 10 + 10 "é" = 30 bytes no longer fit in the 20 left (counted in characters: 20 into 40).
    limits = Limits(put_bytes_per_shard=2, window_seconds=50)
    with _proxy(emu, limits) as proxy:
        kinesis = boto3.client("kinesis", **client_kwargs(proxy.url(), **ONE_ATTEMPT))
        stream = _stream(kinesis)
        kinesis.put_record(StreamName=stream, Data=b"x" * 40, PartitionKey="é" * 20)
        error = _error(lambda: kinesis.put_record(StreamName=stream, Data=b"x" * 10, PartitionKey="é" * 10))
        assert error is not None and error["Error"]["Code"] == "ProvisionedThroughputExceededException"
