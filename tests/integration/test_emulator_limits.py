"""The emulators' limits over real HTTP with boto3: each limit answers with AWS's error, serves again once
its window has passed, and ``limits="off"`` switches them off (docs/emulators.md).

These tests start their own emulators (small limits so that the windows pass in about a second) rather than
the session's, whose account-wide limits other tests share. Clients make one attempt, so botocore's own
throttle retries never hide an answer.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import boto3
import pytest
from botocore.exceptions import ClientError

from tools.emulators import Emulators, client_kwargs
from tools.emulators.kinesis_proxy import KinesisLimitsProxy
from tools.emulators.limits import Limits
from tools.tcp_proxy import FaultProxy

pytestmark = pytest.mark.integration

T = TypeVar("T")
ONE_ATTEMPT: dict[str, Any] = {"retries": {"mode": "standard", "max_attempts": 1}}
SMALL = {
    "iterator_ttl_seconds": 4.0,
    "subscription_seconds": 2.0,
    "get_records_bytes_per_shard": 100_000,
    "put_records_per_shard": 50,
    "dynamodb_partition_wcu": 1,
    "dynamodb_burst_seconds": 2,
}


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulators]:
    with Emulators(limits=SMALL) as emulators:
        yield emulators


@pytest.fixture
def kinesis(emu: Emulators) -> Any:
    return emu.endpoints.client("kinesis", **ONE_ATTEMPT)


@pytest.fixture
def dynamodb(emu: Emulators) -> Any:
    return emu.endpoints.client("dynamodb", **ONE_ATTEMPT)


def _code(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return None


def _burst(call: Callable[[], Any], n: int) -> list[str | None]:
    """``n`` calls started together from ``n`` threads; their error codes, None for a success."""
    return _together(call, n)[0]


def _burst_within(call: Callable[[], Any], n: int, window: float = 1.0) -> list[str | None]:
    """``_burst``, for an exact count of refusals: a loaded machine can spread the calls over more than the
    limit's window (an answer came later than ``window`` after they started), so such a burst is made again
    once that window has passed, up to ten times."""
    for _ in range(10):
        began = time.monotonic()
        codes, answered = _together(call, n)
        if max(answered) - began < window:
            return codes
        time.sleep(window)  # the sliding window empties: time passing is the point
    raise AssertionError(f"{n} calls never fitted in {window} s on this machine")


def _together(call: Callable[[], Any], n: int) -> tuple[list[str | None], list[float]]:
    """``call`` from ``n`` threads released at once: each one's error code and when its answer came."""
    barrier = threading.Barrier(n)
    codes: list[str | None] = [None] * n
    answered = [0.0] * n

    def one(i: int) -> None:
        barrier.wait()
        codes[i] = _code(call)
        answered[i] = time.monotonic()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return codes, answered


def _until(call: Callable[[], T], timeout: float = 10.0, pause: float = 0.05) -> T:
    """``call()`` once it stops raising a throttle (each try waits ``pause`` on an event, never a sleep)."""
    deadline = time.monotonic() + timeout
    waiter = threading.Event()
    while True:
        try:
            return call()
        except ClientError:
            if time.monotonic() > deadline:
                raise
        waiter.wait(pause)


def _stream(kinesis: Any, shards: int = 1) -> str:
    name = f"limits-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=name, ShardCount=shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})
    return name


def _iterator(kinesis: Any, stream: str, kind: str = "TRIM_HORIZON") -> str:
    answer = _until(
        lambda: kinesis.get_shard_iterator(
            StreamName=stream, ShardId="shardId-000000000000", ShardIteratorType=kind
        )
    )
    return str(answer["ShardIterator"])


# ----------------------------------------------------------------------------------------------- Kinesis


def test_get_records_five_calls_per_window_then_serves_again(emu: Emulators, kinesis: Any) -> None:
    # The rule at a window of 4 s (5 calls per 4 s), so that a loaded machine cannot spread the burst over two
    # windows: a proxy of the test's own, in front of kinesis-local.
    host, _, port = emu.kinesis_upstream.removeprefix("http://").rpartition(":")
    limits = Limits(window_seconds=4.0, get_records_per_shard=1.25)
    with KinesisLimitsProxy((host, int(port)), limits) as proxy:
        limited = boto3.client("kinesis", **client_kwargs(proxy.url(), **ONE_ATTEMPT))
        stream = _stream(kinesis)
        iterator = _iterator(limited, stream)
        codes = _burst(lambda: limited.get_records(ShardIterator=iterator), 8)
        assert codes.count(None) == 5
        assert codes.count("ProvisionedThroughputExceededException") == 3
        _until(lambda: limited.get_records(ShardIterator=iterator), timeout=15, pause=0.25)


def test_get_records_big_read_throttles_until_paid_back(kinesis: Any) -> None:
    stream = _stream(kinesis)
    kinesis.put_record(StreamName=stream, Data=b"x" * 150_000, PartitionKey="k")
    iterator = _iterator(kinesis, stream)
    first = kinesis.get_records(ShardIterator=iterator)
    assert len(first["Records"]) == 1
    began = time.monotonic()
    error = _code(lambda: kinesis.get_records(ShardIterator=first["NextShardIterator"]))
    assert error == "ProvisionedThroughputExceededException"  # 150 KB at 100 KB/s: 1.5 s of debt
    _until(lambda: kinesis.get_records(ShardIterator=first["NextShardIterator"]), pause=0.25)
    assert time.monotonic() - began > 1.0


def test_get_shard_iterator_five_per_second_per_shard(kinesis: Any) -> None:
    stream = _stream(kinesis, shards=2)

    def get(shard: str) -> Any:
        return kinesis.get_shard_iterator(StreamName=stream, ShardId=shard, ShardIteratorType="LATEST")

    # Twelve at once: five served in the first second; a loaded machine may spread them over two (then ten),
    # never more (the exact count per window is the limiter's unit test, on made-up time).
    codes = _burst(lambda: get("shardId-000000000000"), 12)
    assert set(codes) == {None, "ProvisionedThroughputExceededException"} and 5 <= codes.count(None) <= 10
    assert _code(lambda: get("shardId-000000000001")) is None
    _until(lambda: get("shardId-000000000000"))


def test_iterator_expires_after_its_ttl(kinesis: Any) -> None:
    stream = _stream(kinesis)
    iterator = _iterator(kinesis, stream)
    assert _code(lambda: kinesis.get_records(ShardIterator=iterator)) is None
    deadline, waiter = time.monotonic() + 10, threading.Event()
    code = None
    while code != "ExpiredIteratorException" and time.monotonic() < deadline:
        waiter.wait(0.25)  # at most 4 calls a second: below the GetRecords rate
        code = _code(lambda: kinesis.get_records(ShardIterator=iterator))
    assert code == "ExpiredIteratorException"
    assert _code(lambda: kinesis.get_records(ShardIterator=_iterator(kinesis, stream))) is None


def test_put_records_per_record_failures_and_put_record_throttled(kinesis: Any) -> None:
    stream = _stream(kinesis)
    records = [{"Data": b"r", "PartitionKey": str(i)} for i in range(100)]
    answer = kinesis.put_records(StreamName=stream, Records=records)
    failed = [r for r in answer["Records"] if r.get("ErrorCode")]
    assert answer["FailedRecordCount"] == len(failed) >= 40  # 50 records/s per shard in this module
    assert {r["ErrorCode"] for r in failed} == {"ProvisionedThroughputExceededException"}
    assert "Rate exceeded for shard shardId-000000000000" in failed[0]["ErrorMessage"]
    assert all("SequenceNumber" in r for r in answer["Records"] if not r.get("ErrorCode"))
    big = {"StreamName": stream, "Data": b"x" * 500_000, "PartitionKey": "k"}
    # 4 MB at once against 1 MiB/s per shard (a bucket of 1 MiB): throttled unless a loaded machine spreads the
    # eight calls over more than three seconds (four calls, 2 MB, were once spread over more than one).
    codes = _burst(lambda: kinesis.put_record(**big), 8)
    assert "ProvisionedThroughputExceededException" in codes
    _until(lambda: kinesis.put_record(StreamName=stream, Data=b"again", PartitionKey="k"))


def test_control_plane_rates(kinesis: Any) -> None:
    stream = _stream(kinesis)
    _until(lambda: kinesis.describe_stream(StreamName=stream))
    codes = _burst_within(lambda: kinesis.describe_stream(StreamName=stream), 12)  # spread: made again
    assert codes.count("LimitExceededException") >= 2  # 10 per second per account
    _until(lambda: kinesis.describe_stream(StreamName=stream))
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    codes = _burst_within(lambda: kinesis.list_stream_consumers(StreamARN=arn), 6)
    assert codes.count("LimitExceededException") == 1  # 5 per second per stream


def test_subscribe_to_shard_once_per_second_and_ends_after_subscription_seconds(
    emu: Emulators, kinesis: Any
) -> None:
    stream = _stream(kinesis)
    arn = kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    consumer = _until(lambda: kinesis.register_stream_consumer(StreamARN=arn, ConsumerName="c"))["Consumer"]
    port = int(emu.endpoints.kinesis_endpoint.rsplit(":", 1)[1])
    with FaultProxy(("127.0.0.1", port), eventstream=True) as shim:
        fanout = boto3.client("kinesis", **client_kwargs(shim.url(), **ONE_ATTEMPT))
        position = {"Type": "TRIM_HORIZON"}

        def subscribe() -> Any:
            return fanout.subscribe_to_shard(
                ConsumerARN=consumer["ConsumerARN"], ShardId="shardId-000000000000", StartingPosition=position
            )

        subscription = _until(subscribe)
        opened = (
            time.monotonic()
        )  # the subscription is open from here (the proxy starts its clock a bit before)
        code = _code(subscribe)
        # Within 5 s of a successful call AWS answers ResourceInUseException (its 1 call per second per consumer
        # and shard then never comes into play).
        assert code == "ResourceInUseException" or time.monotonic() - opened > 5.0, code
        events = sum(1 for _ in subscription["EventStream"])  # ends by itself after subscription_seconds
        assert events >= 1
        assert 0.5 < time.monotonic() - opened < 15

        # The next one is taken at once, as on AWS (kinesis-local frees the ended one late: the proxy asks it
        # again meanwhile; before, its refusal came through, and every renewal counted as a throttle).
        def renew() -> None:
            sum(1 for _ in subscribe()["EventStream"])  # to its end, then the next at once

        assert [_code(renew) for _ in range(3)] == [None] * 3


def test_limits_off_passes_everything() -> None:
    with Emulators(limits="off") as emulators:
        assert emulators.endpoints.kinesis_endpoint == emulators.kinesis_upstream
        kinesis = emulators.endpoints.client("kinesis", **ONE_ATTEMPT)
        stream = _stream(kinesis)
        iterator = _iterator(kinesis, stream)
        assert [_code(lambda: kinesis.get_records(ShardIterator=iterator)) for _ in range(12)] == [None] * 12
        dynamodb = emulators.endpoints.client("dynamodb", **ONE_ATTEMPT)
        _table(dynamodb, provisioned=True)
        assert [
            _code(lambda: dynamodb.put_item(TableName="t1", Item={"pk": {"S": "a"}})) for _ in range(10)
        ] == [None] * 10


# ---------------------------------------------------------------------------------------------- DynamoDB


def _table(dynamodb: Any, provisioned: bool = False, name: str | None = None) -> str:
    """A table keyed ``pk`` (S): provisioned at 1 read and 1 write unit a second, or on-demand."""
    name = name or ("t1" if provisioned else f"limits-{uuid.uuid4().hex[:8]}")
    extra: dict[str, Any] = (
        {"ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}}
        if provisioned
        else {"BillingMode": "PAY_PER_REQUEST"}
    )
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        **extra,
    )
    return name


def test_dynamodb_hot_partition_on_demand_throttles_then_serves(dynamodb: Any) -> None:
    table = _table(dynamodb)

    def put(key: str) -> Any:
        return dynamodb.put_item(TableName=table, Item={"pk": {"S": key}})

    codes = _burst(lambda: put("hot"), 8)
    assert "ThrottlingException" in codes  # 1 WCU per partition key in this module
    try:
        put("hot")
    except ClientError as exc:
        reasons = exc.response.get("throttlingReasons") or exc.response.get("ThrottlingReasons")
        assert reasons and reasons[0]["reason"] == "TableWriteKeyRangeThroughputExceeded"
    assert _code(lambda: put("cold")) is None
    _until(lambda: put("hot"))


def test_dynamodb_provisioned_table_and_transactions(dynamodb: Any) -> None:
    table = _table(dynamodb, provisioned=True)
    codes = _burst(lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": uuid.uuid4().hex}}), 5)
    assert "ProvisionedThroughputExceededException" in codes  # 1 WCU, 2 s of burst
    try:
        dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": table, "Item": {"pk": {"S": "tx"}}}}],
        )
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "TransactionCanceledException"
        # AWS's reason on a provisioned table (ThrottlingError is an on-demand table's)
        assert [r["Code"] for r in exc.response["CancellationReasons"]] == ["ProvisionedThroughputExceeded"]
    else:
        pytest.fail("a transaction on a table out of capacity was not cancelled")
    _until(lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": "later"}}), pause=0.25)
