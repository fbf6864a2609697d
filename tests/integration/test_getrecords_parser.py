"""The lean GetRecords parser over the network (kinesis-local): the bodies the emulator really sends parse to
what botocore's own parser makes of them, and the consumer's ``Record``s are the same, plain and KPL."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from aws_kinesis_agg.aggregator import AggRecord
from botocore.parsers import JSONParser

from consumer.aws import make_client, utc_timestamp
from consumer.retrieval.kinesis import BotoKinesis, to_records
from consumer.retrieval.wire import LeanEventStreamJSONParser, LeanParserFactory
from tools.emulators.settings import ACCESS_KEY_ID, SECRET_ACCESS_KEY

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make_client`` without a session reads the usual chain: the emulators' keys, whatever ran before."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)


def _aggregate(first: int, count: int) -> bytes:
    agg = AggRecord()
    for i in range(first, first + count):
        agg.add_user_record(f"ключ-{i}", os.urandom(i % 50), str(i * 7919) if i % 3 == 0 else None)
    _pk, _ehk, data = agg.get_contents()
    return bytes(data)


@pytest.fixture
def stream(emulators: Any, unique_name: Any) -> Any:
    name = unique_name("lean")
    kinesis = emulators.client("kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=2)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.2})
    plain = [{"Data": os.urandom(i % 300), "PartitionKey": f"pk-{i}-é☃"} for i in range(300)]
    kpl = [{"Data": _aggregate(i * 20, 20), "PartitionKey": f"agg-{i}"} for i in range(10)]
    for entries in (plain[:150], kpl, plain[150:]):
        kinesis.put_records(StreamName=name, Records=entries)
    return name


def test_bodies_from_kinesis_local_parse_as_botocore_does(emulators: Any, stream: str) -> None:
    client = make_client("kinesis", endpoint_url=emulators.kinesis_endpoint, region=emulators.region)
    assert isinstance(client._endpoint._response_parser_factory, LeanParserFactory)
    bodies: list[tuple[Any, dict[str, Any]]] = []

    def keep(http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
        bodies.append((http_response, parsed))

    client.meta.events.register("after-call.kinesis.GetRecords", keep)
    api = BotoKinesis(client)
    delivered = []
    for shard in api.list_shards(stream):
        iterator: str | None = api.get_shard_iterator(stream, shard.shard_id, "TRIM_HORIZON")
        while iterator:
            out = api.get_records(iterator, 100)
            delivered += to_records(stream, shard.shard_id, out.records)
            if not out.records:
                break
            iterator = out.next_iterator
    assert len(delivered) == 300 + 200
    assert sum(r.aggregated for r in delivered) == 200

    stock = JSONParser(timestamp_parser=utc_timestamp)
    output = client.meta.service_model.operation_model("GetRecords").output_shape
    for http_response, parsed in bodies:
        response = {
            "body": http_response.content,
            "headers": http_response.headers,
            "status_code": http_response.status_code,
            "context": {"operation_name": "GetRecords"},
        }
        expected = stock.parse(response, output)
        got = {k: v for k, v in parsed.items() if k != "ResponseMetadata"}
        assert got == {k: v for k, v in expected.items() if k != "ResponseMetadata"}
        assert to_records(stream, "s", got.get("Records", [])) == to_records(
            stream, "s", expected.get("Records", [])
        )


def test_subscribe_to_shard_events_through_the_lean_parser(emulators: Any, stream: str) -> None:
    """SubscribeToShard (via the event-stream shim kinesis-local needs): the same records as GetRecords."""
    from tools.tcp_proxy import FaultProxy

    port = int(emulators.kinesis_endpoint.rsplit(":", 1)[1])
    polled = BotoKinesis(
        make_client("kinesis", endpoint_url=emulators.kinesis_endpoint, region=emulators.region)
    )
    with FaultProxy(("127.0.0.1", port), eventstream=True) as shim:
        api = BotoKinesis(make_client("kinesis", endpoint_url=shim.url(), region=emulators.region))
        consumer_arn = api.register_consumer(stream, "lean")
        shard = "shardId-000000000000"
        expected = to_records(
            stream,
            shard,
            polled.get_records(polled.get_shard_iterator(stream, shard, "TRIM_HORIZON"), 1000).records,
        )
        got = []
        for _ in range(20):  # a subscription may be refused for a moment (limits): retry
            try:
                subscription = api.subscribe(consumer_arn, shard, "TRIM_HORIZON")
                break
            except Exception:
                time.sleep(1)
        assert type(subscription._stream._parser) is LeanEventStreamJSONParser  # type: ignore[attr-defined]
        try:
            for event in subscription:
                got += to_records(stream, shard, event.records)
                if len(got) >= len(expected):
                    break
        finally:
            subscription.close()
    assert expected and got == expected
