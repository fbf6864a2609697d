"""The lean GetRecords / SubscribeToShard parser gives what botocore's own parser gives, for arbitrary bodies:
the parsed response value for value, and the same ``Record``s out of ``to_records`` (KPL included)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
import pytest
from aws_kinesis_agg.aggregator import AggRecord
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.parsers import EventStreamJSONParser, JSONParser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from consumer.aws import make_client, utc_timestamp
from consumer.retrieval.kinesis import KPL_MAGIC, BotoKinesis, to_records
from consumer.retrieval.wire import LeanEventStreamJSONParser, LeanJSONParser, LeanParserFactory

MODEL = botocore.session.get_session().get_service_model("kinesis")
GET_RECORDS = MODEL.operation_model("GetRecords").output_shape
EVENT_STREAM = MODEL.operation_model("SubscribeToShard").output_shape.members["EventStream"]
MISSING = object()


def aggregate(users: list[tuple[str, bytes, str | None]]) -> bytes:
    agg = AggRecord()
    for pk, data, ehk in users:
        agg.add_user_record(pk, data, ehk)
    _pk, _ehk, data = agg.get_contents()
    return bytes(data)


sequences = st.one_of(
    st.integers(0, 10**56 - 1).map(str),  # Kinesis's: up to 56 digits
    st.text(max_size=60),
)
keys = st.text(min_size=1, max_size=256)  # unicode partition keys, surrogates and all
stamps = st.one_of(
    st.floats(0, 4_102_444_800, allow_nan=False).map(lambda f: round(f, 3)),  # epoch seconds, ms fractions
    st.floats(0, 4_102_444_800, allow_nan=False),
    st.integers(0, 4_102_444_800),
)
users = st.lists(
    st.tuples(keys, st.binary(max_size=64), st.one_of(st.none(), st.integers(0, 2**128 - 1).map(str))),
    min_size=1,
    max_size=8,
)
payloads = st.one_of(
    st.binary(max_size=300),
    users.map(aggregate),  # KPL aggregates
    st.binary(max_size=40).map(lambda b: KPL_MAGIC + b),  # magic bytes, not an aggregate
)


@st.composite
def records(draw: st.DrawFn, odd: bool) -> Any:
    """One wire record; ``odd`` also draws what Kinesis never sends (nulls, unknown keys, wrong types)."""
    r: dict[str, Any] = {
        "SequenceNumber": draw(sequences),
        "ApproximateArrivalTimestamp": draw(stamps),
        "Data": base64.b64encode(draw(payloads)).decode(),
        "PartitionKey": draw(keys),
    }
    enc = draw(st.sampled_from([MISSING, "NONE", "KMS", None]))
    if enc is not MISSING:
        r["EncryptionType"] = enc
    if odd:
        field = draw(st.sampled_from([*r, "Unknown"]))
        change = draw(st.sampled_from(["null", "drop", "number", "extra"]))
        if change == "null":
            r[field] = None
        elif change == "drop":
            r.pop(field, None)
        elif change == "number" and field in ("SequenceNumber", "PartitionKey", "EncryptionType"):
            r[field] = draw(st.integers())
        else:
            r["Unknown"] = draw(st.text(max_size=5))
        if draw(st.booleans()):
            return draw(st.sampled_from([None, r]))
    return r


child_shards = st.lists(
    st.fixed_dictionaries(
        {
            "ShardId": st.text(max_size=20),
            "ParentShards": st.lists(st.text(max_size=20), max_size=2),
            "HashKeyRange": st.fixed_dictionaries(
                {"StartingHashKey": st.just("0"), "EndingHashKey": st.integers(0, 2**128).map(str)}
            ),
        }
    ),
    max_size=2,
)


@st.composite
def bodies(draw: st.DrawFn, odd: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {}
    optional = {
        "Records": st.one_of(st.none(), st.lists(records(odd), max_size=30)),
        "NextShardIterator": st.one_of(st.none(), st.text(min_size=1, max_size=100)),
        "MillisBehindLatest": st.one_of(st.none(), st.integers(0, 2**40)),
        "ChildShards": st.one_of(st.none(), child_shards),
    }
    for name, values in optional.items():
        if draw(st.integers(0, 4)):  # mostly present (null sometimes), missing now and then
            body[name] = draw(values)
    return body


def response(body: bytes, status: int = 200) -> dict[str, Any]:
    return {
        "body": body,
        "headers": {"x-amzn-requestid": "req-1", "content-type": "application/x-amz-json-1.1"},
        "status_code": status,
        "context": {"operation_name": "GetRecords"},
    }


def both(parse: Any) -> tuple[Any, Any]:
    """``parse(parser)`` with botocore's parser and the lean one: the result, or the exception type."""
    out = []
    for parser in (
        JSONParser(timestamp_parser=utc_timestamp),
        LeanJSONParser(timestamp_parser=utc_timestamp),
    ):
        try:
            out.append(parse(parser))
        except Exception as exc:
            out.append(type(exc))
    return out[0], out[1]


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(bodies())
def test_get_records_parses_as_botocore_does(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    boto, lean = both(lambda p: p.parse(response(raw), GET_RECORDS))
    assert lean == boto
    wire = boto.get("Records", [])
    assert to_records("s", "shardId-1", lean.get("Records", [])) == to_records("s", "shardId-1", wire)


@SETTINGS
@given(bodies(odd=True))
def test_what_kinesis_never_sends_still_parses_as_botocore_does(body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    boto, lean = both(lambda p: p.parse(response(raw), GET_RECORDS))
    assert lean == boto


@SETTINGS
@given(bodies())
def test_default_timestamp_parser_gives_the_same_instants(body: dict[str, Any]) -> None:
    """Without the UTC parser (e.g. a session made by the caller) the lean parser keeps botocore's default."""
    raw = json.dumps(body).encode()
    boto, lean = JSONParser(), LeanJSONParser()
    assert lean.parse(response(raw), GET_RECORDS) == boto.parse(response(raw), GET_RECORDS)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"[]",
        b'{"Records": 5}',
        b'{"Records": [5]}',
        b'{"Records": [{"Data": "\xc3\xa9"}]}',
        b'{"Records": [{"SequenceNumber": "1", "PartitionKey": "k", "Data": "QQ==", '
        b'"ApproximateArrivalTimestamp": "2024-01-02T03:04:05.678Z"}]}',
        b'{"Records": [{"SequenceNumber": "1", "PartitionKey": "k", "Data": "!!", '
        b'"ApproximateArrivalTimestamp": 1e400}]}',
        b"\xff\xfe",
    ],
)
def test_malformed_bodies_behave_as_in_botocore(raw: bytes) -> None:
    boto, lean = both(lambda p: p.parse(response(raw), GET_RECORDS))
    assert lean == boto


@pytest.mark.parametrize("status", [400, 500, 503])
def test_errors_are_botocore_s(status: int) -> None:
    raw = json.dumps({"__type": "ProvisionedThroughputExceededException", "message": "slow down"}).encode()
    boto, lean = both(lambda p: p.parse(response(raw, status), GET_RECORDS))
    assert lean == boto
    assert lean["Error"]["Code"] == "ProvisionedThroughputExceededException"


def test_arrival_timestamps_are_aware_utc_and_shared_only_when_equal() -> None:
    body = {
        "Records": [
            {"SequenceNumber": str(i), "PartitionKey": "k", "Data": "", "ApproximateArrivalTimestamp": t}
            for i, t in enumerate([1.5, 1.5, 2, 2.0, 1.5])
        ]
    }
    out = LeanJSONParser(timestamp_parser=utc_timestamp).parse(
        response(json.dumps(body).encode()), GET_RECORDS
    )
    stamps = [r["ApproximateArrivalTimestamp"] for r in out["Records"]]
    assert stamps == [datetime.fromtimestamp(t, UTC) for t in (1.5, 1.5, 2, 2, 1.5)]
    assert all(s.tzinfo is UTC for s in stamps)


def test_other_shapes_and_protocols_are_botocore_s() -> None:
    factory = LeanParserFactory()
    assert type(factory.create_parser("json")) is LeanJSONParser
    assert type(factory.create_parser("smithy-rpc-v2-cbor")).__name__ == "RpcV2CBORParser"
    shards = MODEL.operation_model("ListShards").output_shape
    raw = json.dumps({"Shards": [{"ShardId": "s-1", "HashKeyRange": {"StartingHashKey": "0"}}]}).encode()
    boto, lean = both(lambda p: p.parse(response(raw), shards))
    assert lean == boto


def test_kinesis_is_still_on_the_json_protocol() -> None:
    """The lean path is for ``json``: a botocore that moves Kinesis to CBOR would get the stock parser."""
    assert MODEL.resolved_protocol == "json"


@SETTINGS
@given(bodies())
def test_subscribe_to_shard_events_parse_as_botocore_does(body: dict[str, Any]) -> None:
    event = {k: v for k, v in body.items() if k != "NextShardIterator"}
    event["ContinuationSequenceNumber"] = "123"
    raw = json.dumps(event).encode()
    headers = {":event-type": "SubscribeToShardEvent", ":message-type": "event"}
    msg = {"body": raw, "headers": headers, "status_code": 200}
    boto = EventStreamJSONParser(utc_timestamp, None).parse(dict(msg), EVENT_STREAM)
    lean = LeanEventStreamJSONParser(utc_timestamp, None).parse(dict(msg), EVENT_STREAM)
    assert lean == boto
    assert type(LeanJSONParser()._event_stream_parser) is LeanEventStreamJSONParser


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def _client_answering(monkeypatch: pytest.MonkeyPatch, status: int, body: dict[str, Any]) -> Any:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = make_client("kinesis", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    raw = json.dumps(body).encode()
    headers = {"x-amzn-requestid": "r", "content-type": "application/x-amz-json-1.1"}

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, status, headers, _Raw(raw))

    client.meta.events.register("before-send.kinesis.GetRecords", answer)
    return client


def test_make_client_uses_the_lean_parser_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    data = aggregate([("pk-é", b"\x00\x01", None), ("k2", b"two", "123")])
    rec: dict[str, Any] = {
        "SequenceNumber": "9" * 56,
        "PartitionKey": "a",
        "Data": base64.b64encode(data).decode(),
    }
    rec["ApproximateArrivalTimestamp"] = 1700000000.123
    client = _client_answering(
        monkeypatch, 200, {"Records": [rec], "NextShardIterator": "it", "MillisBehindLatest": 7}
    )
    assert isinstance(client._endpoint._response_parser_factory, LeanParserFactory)
    out = BotoKinesis(client).get_records("it-0", 100)
    assert (out.next_iterator, out.millis_behind_latest) == ("it", 7)
    got = to_records("s", "sh", out.records)
    assert [(r.sub_sequence_number, r.partition_key, r.data, r.explicit_hash_key) for r in got] == [
        (0, "pk-é", b"\x00\x01", None),
        (1, "k2", b"two", "123"),
    ]
    assert got[0].approximate_arrival == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)


def test_clients_of_the_consumers_own_sessions_share_one_data_loader_and_keep_their_own_parsers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    made = [
        make_client(s, endpoint_url="http://127.0.0.1:9", region="us-east-1") for s in ("dynamodb", "kinesis")
    ]
    dynamodb, kinesis, again = (*made, make_client("kinesis", region="us-east-1"))
    assert dynamodb._loader is kinesis._loader is again._loader  # the service models are read once
    assert isinstance(kinesis._endpoint._response_parser_factory, LeanParserFactory)
    assert not isinstance(dynamodb._endpoint._response_parser_factory, LeanParserFactory)
    given = boto3.session.Session(region_name="us-east-1")  # a caller's session is used as it is
    assert make_client("dynamodb", session=given)._loader is given._session.get_component("data_loader")


def test_make_client_errors_are_client_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _client_answering(monkeypatch, 400, {"__type": "ExpiredIteratorException", "message": "expired"})
    client.meta.config.retries = {"total_max_attempts": 1}
    with pytest.raises(ClientError) as err:
        client.get_records(ShardIterator="it", Limit=1)
    assert err.value.response["Error"]["Code"] == "ExpiredIteratorException"
