"""The emulators' limits layer on made-up time: rate primitives, settings, Kinesis and DynamoDB decisions."""

from __future__ import annotations

import json
from functools import partial

import pytest

from tools.coordination.billing import read_units
from tools.emulators.dynamodb_limiter import DynamoDBLimiter, TableInfo, plan, write_units
from tools.emulators.kinesis_limiter import EXPIRED, LIMIT, THROUGHPUT, KinesisLimiter
from tools.emulators.kinesis_proxy import ShardMap, data_size, drop_whole_events, hash_key, stream_name
from tools.emulators.limits import MIB, Keyed, Limits, LimitsError, SlidingWindow, TokenBucket
from tools.emulators.settings import region_of
from tools.http_framing import Head, initial_response_message

# ------------------------------------------------------------------------------------------ rate primitives


def test_sliding_window_allows_limit_per_window_and_refused_calls_do_not_count() -> None:
    window = SlidingWindow(5, 1.0)
    assert all(window.try_acquire(0.1 * i) for i in range(5))
    assert not window.try_acquire(0.5)
    assert not window.try_acquire(0.99)
    assert window.try_acquire(1.0)  # the first call (t=0) left the window
    assert not window.try_acquire(1.05)
    assert window.try_acquire(1.1)


def test_sliding_window_never_more_than_limit_in_any_window() -> None:
    window = SlidingWindow(5, 1.0)
    accepted = [t / 100 for t in range(0, 500, 7) if window.try_acquire(t / 100)]
    for start in accepted:
        assert sum(1 for t in accepted if start <= t < start + 1.0) <= 5


def test_token_bucket_take_refill_and_debt() -> None:
    bucket = TokenBucket(rate=10, capacity=10, now=0.0)
    assert bucket.try_take(0.0, 10)
    assert not bucket.try_take(0.0, 1)
    assert bucket.try_take(0.1, 1)  # refilled one token
    assert bucket.available(0.1) == pytest.approx(0.0)
    debt = TokenBucket(rate=2 * MIB, capacity=0, now=0.0)
    assert debt.admit(0.0)
    debt.charge(0.0, 10 * MIB)  # AWS: a 10 MiB read, then 5 s of ProvisionedThroughputExceeded
    assert not debt.admit(4.9)
    assert debt.admit(5.0)


def test_token_bucket_oversized_take_needs_a_full_bucket() -> None:
    bucket = TokenBucket(rate=1, capacity=2, now=0.0)
    assert bucket.try_take(0.0, 5)  # larger than the capacity: allowed from full, leaves a debt
    assert not bucket.try_take(1.0, 1)
    assert bucket.try_take(5.0, 1)


def test_keyed_keeps_state_and_drops_the_least_recently_used() -> None:
    keyed: Keyed[SlidingWindow] = Keyed(partial(SlidingWindow, 1, 1.0), max_keys=10)
    for i in range(10):
        assert keyed.at(i).try_acquire(0.0)
    assert not keyed.at(0).try_acquire(0.5)  # the same window: full
    keyed.at("new")  # 1 is now the least recently used
    assert len(keyed) == 10 and 1 not in keyed and 0 in keyed


# ---------------------------------------------------------------------------------------------- settings


def test_limits_from_env_switches_and_names_the_bad_setting() -> None:
    assert Limits.from_env({}) == Limits()
    assert not Limits.from_env({"EMULATORS_LIMITS": "off"}).enabled
    limits = Limits.from_env(
        {"EMULATORS_LIMIT_GET_RECORDS_PER_SHARD": "10", "EMULATORS_LIMIT_PUT_BYTES_PER_SHARD": "off"}
    )
    assert limits.get_records_per_shard == 10 and limits.put_bytes_per_shard is None
    with pytest.raises(LimitsError, match="EMULATORS_LIMIT_GET_RECORDS_PER_SHARD"):
        Limits.from_env({"EMULATORS_LIMIT_GET_RECORDS_PER_SHARD": "fast"})
    with pytest.raises(LimitsError, match="EMULATORS_LIMIT_NOPE"):
        Limits.from_env({"EMULATORS_LIMIT_NOPE": "1"})
    with pytest.raises(LimitsError, match="EMULATORS_LIMITS"):
        Limits.from_env({"EMULATORS_LIMITS": "maybe"})
    with pytest.raises(LimitsError, match=r"Limits\.window_seconds"):
        Limits(window_seconds=0)
    with pytest.raises(LimitsError, match="window_seconds: cannot be switched off"):
        Limits.resolve({"window_seconds": "off"})


def test_limits_resolve_and_json_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMULATORS_LIMIT_ITERATOR_TTL_SECONDS", "7")
    assert Limits.resolve(None).iterator_ttl_seconds == 7
    assert Limits.resolve({"put_records_per_shard": "off"}).put_records_per_shard is None
    assert Limits.resolve({"put_records_per_shard": "off"}).iterator_ttl_seconds == 7
    assert not Limits.resolve("off").enabled and not Limits.resolve(False).enabled
    limits = Limits(subscription_seconds=None, get_records_burst_bytes=5)
    assert Limits(**json.loads(limits.to_json())) == limits
    assert limits.describe()["subscription_seconds"] == "off"
    assert Limits(enabled=False).active("get_records_per_shard") is None


# ----------------------------------------------------------------------------------------------- Kinesis


def test_get_records_five_calls_per_second_per_shard() -> None:
    limiter = KinesisLimiter(Limits())
    limiter.iterator_issued("it-a", "s", "shard-0", 0.0)
    limiter.iterator_issued("it-b", "s", "shard-1", 0.0)
    results = [limiter.check_get_records("it-a", 0.1 + i * 0.01)[1] for i in range(6)]
    assert results[:5] == [None] * 5
    assert results[5] is not None and results[5].code == THROUGHPUT
    assert "shard-0" in results[5].message
    assert limiter.check_get_records("it-b", 0.2)[1] is None  # another shard has its own budget
    assert limiter.check_get_records("it-a", 1.1)[1] is None  # the window moved on


def test_get_records_big_read_throttles_the_following_seconds() -> None:
    limiter = KinesisLimiter(Limits())
    limiter.iterator_issued("it", "s", "shard-0", 0.0)
    key, refusal = limiter.check_get_records("it", 0.0)
    assert key == ("s", "shard-0") and refusal is None
    limiter.records_read(key, 10 * MIB, 0.0)
    for t in (1.0, 2.5, 4.9):
        refusal = limiter.check_get_records("it", t)[1]
        assert refusal is not None and refusal.code == THROUGHPUT
    assert limiter.check_get_records("it", 5.0)[1] is None


def test_iterators_expire_and_unknown_ones_pass() -> None:
    limiter = KinesisLimiter(Limits(iterator_ttl_seconds=300), wall_offset=1_700_000_000.0)
    limiter.iterator_issued("it", "s", "shard-0", 10.0)
    assert limiter.check_get_records("it", 309.9)[1] is None
    refusal = limiter.check_get_records("it", 310.1)[1]
    assert refusal is not None and refusal.code == EXPIRED
    assert "tolerated delay of 300000 milliseconds" in refusal.message
    assert limiter.check_get_records("never-seen", 310.1) == (None, None)
    limiter.iterator_issued("later", "s", "shard-0", 1000.0)  # prunes entries older than 2 TTLs
    assert limiter.check_get_records("it", 1000.0) == (None, None)  # forgotten: passes, unattributed


def test_limits_changed_while_a_call_is_under_way_keep_limiting_its_shard() -> None:
    """``set_limits`` during a GetRecords: the call's answer notes its next iterator in the limiter it started
    with, which the new one must know (before, it had copied the registry before that, and the shard's chain of
    iterators passed unlimited for good)."""
    old = KinesisLimiter(Limits())
    old.iterator_issued("it-1", "s", "shard-0", 0.0)
    assert old.check_get_records("it-1", 0.1)[0] == ("s", "shard-0")  # the call starts under the old limits
    new = KinesisLimiter(Limits(get_records_per_shard=1))  # set_limits: a new limiter adopts the iterators
    new.adopt_iterators(old)
    old.iterator_issued("it-2", "s", "shard-0", 0.2)  # the call's answer, noted where it started
    assert new.check_get_records("it-2", 0.3) == (("s", "shard-0"), None)
    key, refusal = new.check_get_records("it-2", 0.4)  # the second in one second: refused, as for any shard
    assert key == ("s", "shard-0") and refusal is not None and refusal.code == THROUGHPUT
    new.iterator_issued("it-3", "s", "shard-0", 0.5)  # and what the new one notes, the old one knows
    assert old.check_get_records("it-3", 0.6)[0] == ("s", "shard-0")


def test_get_shard_iterator_and_control_plane_limits() -> None:
    limiter = KinesisLimiter(Limits())
    assert [limiter.check_call("GetShardIterator", "s", "shard-0", 0.0) is None for _ in range(6)] == [
        True
    ] * 5 + [False]
    summaries = [limiter.check_call("DescribeStreamSummary", f"s{i}", "", 0.0) for i in range(21)]
    assert summaries[:20] == [None] * 20  # per account: the stream does not matter
    assert summaries[20] is not None and summaries[20].code == LIMIT
    consumers = [limiter.check_call("ListStreamConsumers", "s", "", 0.0) for _ in range(6)]
    assert consumers[5] is not None and limiter.check_call("ListStreamConsumers", "other", "", 0.0) is None
    assert limiter.check_call("PutRecord", "s", "", 0.0) is None  # not a control-plane limit


def test_subscribe_once_per_second_per_consumer_and_shard() -> None:
    limiter = KinesisLimiter(Limits())
    assert limiter.check_call("SubscribeToShard", "s", "shard-0", 0.0, "arn:c1") is None
    refusal = limiter.check_call("SubscribeToShard", "s", "shard-0", 0.5, "arn:c1")
    assert refusal is not None and refusal.code == LIMIT
    assert limiter.check_call("SubscribeToShard", "s", "shard-1", 0.5, "arn:c1") is None
    assert limiter.check_call("SubscribeToShard", "s", "shard-0", 0.5, "arn:c2") is None
    assert limiter.check_call("SubscribeToShard", "s", "shard-0", 1.0, "arn:c1") is None


def test_puts_per_shard_records_and_bytes() -> None:
    limiter = KinesisLimiter(Limits())
    admitted = limiter.admit_puts("s", [("shard-0", 10)] * 1001 + [("shard-1", 10)], 0.0)
    assert admitted.count(False) == 1 and admitted[1000] is False and admitted[1001] is True
    assert limiter.admit_puts("s", [("shard-0", 10)], 0.002) == [True]  # 2 records refilled after 2 ms
    big = limiter.admit_puts("t", [("shard-0", 600 * 1024), ("shard-0", 600 * 1024), ("shard-0", 100)], 0.0)
    assert big == [True, False, True]  # 1 MiB/s: the second does not fit, a small one still does
    assert limiter.refusals["PutRecords"] == 2
    assert (
        KinesisLimiter(Limits(enabled=False)).admit_puts("s", [("shard-0", 10)] * 2000, 0.0) == [True] * 2000
    )


def test_routing_helpers() -> None:
    shard_map = ShardMap(
        [
            {
                "ShardId": "a",
                "HashKeyRange": {"StartingHashKey": "0"},
                "SequenceNumberRange": {"EndingSequenceNumber": "9"},
            },
            {
                "ShardId": "b",
                "HashKeyRange": {"StartingHashKey": "0"},
                "SequenceNumberRange": {"EndingSequenceNumber": None},
            },
            {"ShardId": "c", "HashKeyRange": {"StartingHashKey": str(2**127)}, "SequenceNumberRange": {}},
        ]
    )
    assert shard_map.shard_for(5) == "b" and shard_map.shard_for(2**127 + 1) == "c"
    assert hash_key({"ExplicitHashKey": "42", "PartitionKey": "x"}) == 42
    assert hash_key({"PartitionKey": "a"}) == int("0cc175b9c0f1b6a831c399e269772661", 16)
    assert data_size("aGVsbG8=") == 5 and data_size("") == 0
    assert stream_name({"StreamARN": "arn:aws:kinesis:us-east-1:1:stream/orders"}) == "orders"
    assert stream_name({"ConsumerARN": "arn:aws:kinesis:us-east-1:1:stream/orders/consumer/c:1"}) == "orders"
    auth = "AWS4-HMAC-SHA256 Credential=testing/20260101/eu-west-1/kinesis/aws4_request, SignedHeaders=host"
    assert region_of(auth) == "eu-west-1" and region_of("") == ""
    head = Head.parse(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n")
    assert head.chunked() and head.with_length(3) == b"POST / HTTP/1.1\r\nX-A: 1\r\nContent-Length: 3\r\n\r\n"


def test_event_boundary_follows_messages_split_anywhere() -> None:
    message = initial_response_message()
    stream = message * 3
    for cut in range(1, len(stream)):
        pending = bytearray()
        drop_whole_events(pending, memoryview(stream[:cut]))
        assert (not pending) == (cut % len(message) == 0)
        drop_whole_events(pending, memoryview(stream[cut:]))
        assert not pending


# ---------------------------------------------------------------------------------------------- DynamoDB

ON_DEMAND = TableInfo("t", "arn:aws:dynamodb:us-east-1:1:table/t", "pk", on_demand=True)
PROVISIONED = TableInfo("p", "arn:aws:dynamodb:us-east-1:1:table/p", "pk", on_demand=False, rcu=5, wcu=2)


def test_units() -> None:
    assert write_units(10) == 1 and write_units(1025) == 2 and write_units(10, transactional=True) == 2
    assert read_units(10, consistent=True) == 1 and read_units(10, consistent=False) == 0.5
    assert read_units(8193, consistent=True) == 3 and read_units(1, True, transactional=True) == 2


def test_partition_write_limit_on_demand_answers_throttling_exception() -> None:
    limiter = DynamoDBLimiter(Limits())
    results = [limiter.take_writes([(ON_DEMAND, '{"S":"hot"}', 1.0)], 0.0)[0] for _ in range(1001)]
    assert results[:1000] == [None] * 1000
    throttle = results[1000]
    assert throttle is not None and throttle.code == "ThrottlingException"
    body = json.loads(throttle.body())
    assert body["__type"].endswith("#ThrottlingException")
    assert body["throttlingReasons"] == [
        {"reason": "TableWriteKeyRangeThroughputExceeded", "resource": ON_DEMAND.arn}
    ]
    assert limiter.take_writes([(ON_DEMAND, '{"S":"cold"}', 1.0)], 0.0) == [None]
    assert limiter.take_writes([(ON_DEMAND, '{"S":"hot"}', 1.0)], 0.01) == [None]  # 10 WCU refilled


def test_provisioned_table_burst_then_rate() -> None:
    limiter = DynamoDBLimiter(Limits(dynamodb_burst_seconds=10))
    taken = [limiter.take_writes([(PROVISIONED, f'"{i}"', 1.0)], 0.0)[0] for i in range(21)]
    assert taken[:20] == [None] * 20  # 2 WCU x 10 s of burst
    throttle = taken[20]
    assert throttle is not None and throttle.code == "ProvisionedThroughputExceededException"
    assert (
        json.loads(throttle.body())["ThrottlingReasons"][0]["reason"]
        == "TableWriteProvisionedThroughputExceeded"
    )
    assert limiter.take_writes([(PROVISIONED, '"x"', 1.0)], 0.5) == [None]


def test_reads_admitted_without_debt_and_charged_after() -> None:
    limiter = DynamoDBLimiter(Limits())
    assert limiter.admit_reads([(ON_DEMAND, '"k"')], 0.0) == [None]
    limiter.charge_reads([(ON_DEMAND, '"k"', 6000.0)], 0.0)
    refused = limiter.admit_reads([(ON_DEMAND, '"k"')], 0.5)[0]
    assert refused is not None and refused.reason == "TableReadKeyRangeThroughputExceeded"
    assert limiter.admit_reads([(ON_DEMAND, '"k"')], 1.0) == [None]


def test_transaction_all_or_nothing_and_cancellation_reasons() -> None:
    limiter = DynamoDBLimiter(Limits(dynamodb_partition_wcu=2))
    request = {
        "TransactItems": [
            {"Put": {"TableName": "t", "Item": {"pk": {"S": "a"}}}},
            {"Update": {"TableName": "t", "Key": {"pk": {"S": "b"}}}},
        ]
    }
    first = plan("TransactWriteItems", request, lambda name: ON_DEMAND)
    assert first is not None and first.admit(limiter, 0.0) == (None, None)
    second = plan("TransactWriteItems", request, lambda name: ON_DEMAND)
    assert second is not None
    error, _ = second.admit(limiter, 0.0)
    assert error is not None
    body = json.loads(error)
    assert body["__type"].endswith("#TransactionCanceledException")
    assert [r["Code"] for r in body["CancellationReasons"]] == ["ThrottlingError", "ThrottlingError"]


def test_batch_write_partly_throttled_returns_unprocessed_items() -> None:
    limiter = DynamoDBLimiter(Limits(dynamodb_partition_wcu=1))
    puts = [{"PutRequest": {"Item": {"pk": {"S": key}}}} for key in ("a", "a", "b")]
    batch = plan("BatchWriteItem", {"RequestItems": {"t": puts}}, lambda name: ON_DEMAND)
    assert batch is not None
    error, reduced = batch.admit(limiter, 0.0)
    assert error is None and reduced == {"RequestItems": {"t": [puts[0], puts[2]]}}
    answer = json.loads(batch.served(limiter, b'{"UnprocessedItems": {}}', 0.0))
    assert answer["UnprocessedItems"] == {"t": [puts[1]]}
    again = plan("BatchWriteItem", {"RequestItems": {"t": puts[:1]}}, lambda name: ON_DEMAND)
    assert again is not None and again.admit(limiter, 0.0)[0] is not None  # all throttled: an error


def test_plan_skips_unknown_tables_and_control_plane() -> None:
    assert plan("PutItem", {"TableName": "gone", "Item": {}}, lambda name: None) is None
    assert plan("DescribeTable", {"TableName": "t"}, lambda name: ON_DEMAND) is None
