"""Smoke tests of the local emulator harness (the tools/emulators package).

If one of these fails, the emulators are broken or misconfigured, not the consumer: fix the harness first.
"""

from __future__ import annotations

import http.client
import io
import os
import re
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tools._emulator_moto import SerializedApp, parse_services, signing_service
from tools.emulators import EmulatorError, Emulators
from tools.emulators.children import http_ok, listening_addresses
from tools.emulators.harness import loopback_main_js

pytestmark = pytest.mark.integration

MAX_HASH_KEY = 2**128 - 1


def _wait_for_stream(kinesis, name: str, timeout: float = 30.0) -> float:
    """Seconds until the stream is ACTIVE; fails with a clear message if it never gets there."""
    began = time.monotonic()
    while True:
        status = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamStatus"]
        elapsed = time.monotonic() - began
        if status == "ACTIVE":
            return elapsed
        if elapsed > timeout:
            pytest.fail(
                f"kinesis-local: stream {name} still {status} after {timeout:.0f}s; "
                "are the *_DURATION settings in tools.emulators.KINESIS_LOCAL_SETTINGS applied?"
            )
        time.sleep(0.02)


def _read_shard(kinesis, stream: str, shard_id: str, max_calls: int = 50) -> tuple[list[bytes], dict]:
    """Every record of a shard from TRIM_HORIZON, and the last GetRecords response."""
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    data: list[bytes] = []
    response: dict = {}
    for _ in range(max_calls):
        response = kinesis.get_records(ShardIterator=iterator, Limit=100)
        data.extend(record["Data"] for record in response["Records"])
        iterator = response.get("NextShardIterator")
        if iterator is None or (not response["Records"] and response.get("MillisBehindLatest") == 0):
            break
    return data, response


# ------------------------------------------------------------------------------------------------ harness


def test_emulators_listen_on_loopback_only(emulators):
    for name, url in (("kinesis-local", emulators.kinesis_endpoint), ("moto", emulators.aws_endpoint)):
        parsed = urllib.parse.urlsplit(url)
        assert parsed.hostname == "127.0.0.1", f"{name} endpoint {url} is not on 127.0.0.1"
        addresses = listening_addresses(parsed.port or 0)
        if addresses is None:
            pytest.skip("/proc/net/tcp is not readable here")
        assert addresses, f"nothing listens on {url} ({name})"
        assert all(a in {"127.0.0.1", "::ffff:127.0.0.1"} for a in addresses), (
            f"{name} listens on {addresses}"
        )
    assert http_ok(emulators.kinesis_endpoint + "/healthcheck"), "kinesis-local /healthcheck does not answer"
    assert http_ok(emulators.aws_endpoint + "/moto-api/"), "moto server does not answer"


def test_bind_address_patch_is_checked():
    source = b'var h = Host$().em("0.0.0.0"); var other = "10.0.0.0";'
    patched = loopback_main_js(source)
    assert b'em("127.0.0.1")' in patched
    assert b'"10.0.0.0"' in patched
    with pytest.raises(EmulatorError, match=re.escape('no "0.0.0.0" bind-address literal')):
        loopback_main_js(b"Host$().em(bindHost)")
    with pytest.raises(EmulatorError, match=re.escape("still mentions 0.0.0.0")):
        loopback_main_js(b'em("0.0.0.0"); var cidr = 0.0.0.0/0;')


def test_failed_start_reports_log_tail(tmp_path):
    fake_node = tmp_path / "node"
    fake_node.write_text("#!/bin/sh\necho 'fake node: cannot start' >&2\nexit 3\n")
    fake_node.chmod(0o755)
    emulators = Emulators(node=str(fake_node), start_timeout=20, work_root=tmp_path)
    with pytest.raises(EmulatorError) as failure:
        emulators.start()
    message = str(failure.value)
    assert "kinesis-local exited with code 3" in message
    assert "fake node: cannot start" in message
    assert emulators.pids == {}
    with pytest.raises(EmulatorError, match="not running"):
        emulators.client("kinesis")


def test_stop_leaves_no_processes(tmp_path):
    with Emulators(work_root=tmp_path) as emulators:
        pids = emulators.pids
        assert set(pids) == {"kinesis-local", "moto", "kinesis-limits"}
        assert emulators.startup_seconds["total"] < 60
    for name, pid in pids.items():
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)  # the whole process group is gone, not just its leader
        assert name
    assert list(tmp_path.iterdir()) == [], "the run directory was not removed"


def _signed(service: str) -> dict[str, str]:
    """Headers that route a request to ``service`` (moto reads the scope; it checks no signature)."""
    scope = f"testing/20261127/us-east-1/{service}/aws4_request"
    return {"Authorization": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0"}


def test_moto_serializes_each_service_but_not_across_services():
    """The lock of tools/_emulator_moto.py: DynamoDB requests one at a time, SQS ones side by side, bodies read
    before the lock (the isolation itself, on the running emulator: tests/integration/test_emulator_isolation.py)."""
    in_flight: dict[str, int] = {"dynamodb": 0, "sqs": 0}
    most: dict[str, int] = {"dynamodb": 0, "sqs": 0}
    both_sqs_inside = threading.Barrier(2)
    dynamodb_overlap = threading.Event()
    guard = threading.Lock()
    bodies: list[bytes] = []

    def inner(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        service = str(signing_service(environ))
        with guard:
            in_flight[service] += 1
            most[service] = max(most[service], in_flight[service])
            if service == "dynamodb" and in_flight[service] > 1:
                dynamodb_overlap.set()
            bodies.append(environ["wsgi.input"].read())
        if service == "sqs":
            both_sqs_inside.wait(timeout=10)  # only returns when a second SQS request is inside too
        else:
            dynamodb_overlap.wait(0.1)  # a window for a second DynamoDB request to (wrongly) come in
        with guard:
            in_flight[service] -= 1
        start_response("200 OK", [])
        return [b"o", b"k"]

    app = SerializedApp(inner, parse_services("dynamodb,s3"))

    def call(service: str) -> bytes:
        body = f"body-{service}".encode()
        environ = {
            "HTTP_AUTHORIZATION": _signed(service)["Authorization"],
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
        }
        return b"".join(app(environ, lambda status, headers, exc_info=None: None))

    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(call, ["dynamodb"] * 4 + ["sqs"] * 2))
    assert replies == [b"ok"] * 6
    assert most == {"dynamodb": 1, "sqs": 2}
    assert sorted(set(bodies)) == [b"body-dynamodb", b"body-sqs"]
    assert parse_services("none") == () and parse_services("") == ()
    assert signing_service({"HTTP_AUTHORIZATION": ""}) is None


# ------------------------------------------------------------------------------------------------ Kinesis


def test_kinesis_put_get_split_and_shard_end(kinesis_client, unique_name):
    kinesis = kinesis_client
    stream = unique_name("stream")
    kinesis.create_stream(StreamName=stream, ShardCount=2)
    _wait_for_stream(kinesis, stream)

    shards = kinesis.list_shards(StreamName=stream)["Shards"]
    assert len(shards) == 2, shards
    low, high = sorted(shards, key=lambda shard: int(shard["HashKeyRange"]["StartingHashKey"]))

    entries = [
        {"Data": f"record-{i}".encode(), "PartitionKey": f"pk-{i}", "ExplicitHashKey": str(key)}
        for i, key in enumerate([1, MAX_HASH_KEY - 1] * 3)
    ]
    put = kinesis.put_records(StreamName=stream, Records=entries)
    assert put["FailedRecordCount"] == 0, put
    assert [r["ShardId"] for r in put["Records"]] == [low["ShardId"], high["ShardId"]] * 3

    low_data, _ = _read_shard(kinesis, stream, low["ShardId"])
    high_data, _ = _read_shard(kinesis, stream, high["ShardId"])
    assert low_data == [b"record-0", b"record-2", b"record-4"]
    assert high_data == [b"record-1", b"record-3", b"record-5"]

    # Split the low shard; the parent closes and must end with a null NextShardIterator (SHARD_END).
    low_end = int(low["HashKeyRange"]["EndingHashKey"])
    kinesis.split_shard(StreamName=stream, ShardToSplit=low["ShardId"], NewStartingHashKey=str(low_end // 2))
    _wait_for_stream(kinesis, stream)
    after = {shard["ShardId"]: shard for shard in kinesis.list_shards(StreamName=stream)["Shards"]}
    assert len(after) == 4, after
    children = sorted(s["ShardId"] for s in after.values() if s.get("ParentShardId") == low["ShardId"])
    assert len(children) == 2, after
    assert "EndingSequenceNumber" in after[low["ShardId"]]["SequenceNumberRange"], "parent shard not closed"

    late = kinesis.put_record(StreamName=stream, Data=b"after-split", PartitionKey="pk", ExplicitHashKey="1")
    assert late["ShardId"] in children

    parent_data, last = _read_shard(kinesis, stream, low["ShardId"])
    assert parent_data == low_data
    assert last.get("NextShardIterator") is None, (
        "closed parent shard did not return a null NextShardIterator at its end (no SHARD_END); "
        "is the Kinesis endpoint really kinesis-local?"
    )
    assert sorted(child["ShardId"] for child in last.get("ChildShards", [])) == children

    kinesis.delete_stream(StreamName=stream, EnforceConsumerDeletion=True)


# ----------------------------------------------------------------------------------------------- DynamoDB


def test_dynamodb_conditional_write_and_transaction(dynamodb_client, unique_name):
    dynamodb = dynamodb_client
    table = unique_name("table")
    dynamodb.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 0.1, "MaxAttempts": 100})

    item = {"pk": {"S": "lease-1"}, "owner": {"S": "worker-a"}, "counter": {"N": "1"}}
    dynamodb.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(pk)")
    with pytest.raises(ClientError) as failed:
        dynamodb.put_item(
            TableName=table,
            Item={**item, "owner": {"S": "worker-b"}},
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert failed.value.response.get("Item", {}).get("owner") == {"S": "worker-a"}

    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": table,
                    "Key": {"pk": {"S": "lease-1"}},
                    "UpdateExpression": "SET #o = :new, #c = #c + :one",
                    "ConditionExpression": "#o = :old",
                    "ExpressionAttributeNames": {"#o": "owner", "#c": "counter"},
                    "ExpressionAttributeValues": {
                        ":new": {"S": "worker-b"},
                        ":old": {"S": "worker-a"},
                        ":one": {"N": "1"},
                    },
                }
            },
            {
                "Put": {
                    "TableName": table,
                    "Item": {"pk": {"S": "lease-2"}, "owner": {"S": "worker-b"}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
    )
    lease_1 = dynamodb.get_item(TableName=table, Key={"pk": {"S": "lease-1"}}, ConsistentRead=True)["Item"]
    assert lease_1["owner"] == {"S": "worker-b"} and lease_1["counter"] == {"N": "2"}

    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "lease-1"}},
                        "ConditionExpression": "#o = :old",
                        "ExpressionAttributeNames": {"#o": "owner"},
                        "ExpressionAttributeValues": {":old": {"S": "worker-a"}},
                    }
                },
                {"Delete": {"TableName": table, "Key": {"pk": {"S": "lease-2"}}}},
            ]
        )
    assert cancelled.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert "ConditionalCheckFailed" in str(cancelled.value)
    assert "Item" in dynamodb.get_item(TableName=table, Key={"pk": {"S": "lease-2"}}), "cancelled tx applied"

    dynamodb.delete_table(TableName=table)


# ---------------------------------------------------------------------------------------------- SQS and S3


def test_sqs_send_receive_delete(sqs_client, unique_name):
    sqs = sqs_client
    queue_url = sqs.create_queue(QueueName=unique_name("queue"))["QueueUrl"]
    assert urllib.parse.urlsplit(queue_url).hostname in {"127.0.0.1", "localhost"}, queue_url
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=1)["Messages"]
    assert [m["Body"] for m in messages] == ["hello"]
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=messages[0]["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=0).get("Messages", []) == []
    sqs.delete_queue(QueueUrl=queue_url)


def test_s3_put_get(s3_client, unique_name):
    bucket = unique_name("bucket")
    s3_client.create_bucket(Bucket=bucket)
    s3_client.put_object(Bucket=bucket, Key="a/b.json", Body=b'{"ok": true}')
    assert s3_client.get_object(Bucket=bucket, Key="a/b.json")["Body"].read() == b'{"ok": true}'


def test_moto_answers_many_requests_on_one_kept_alive_connection(emulators, unique_name):
    """werkzeug closed the connection after each answer; moto's server now keeps it for the next request, with
    bodiless answers (HEAD, an S3 upload after ``100 Continue``) framed right, and a chunked upload still
    answered (on a connection closed after it)."""
    url = urllib.parse.urlsplit(emulators.aws_endpoint)
    conn = http.client.HTTPConnection(url.hostname or "", url.port)
    bucket = f"/{unique_name('keep')}"

    def call(method: str, path: str, service: str, body: bytes | None = None, **headers: str) -> bytes:
        conn.request(method, path, body=body, headers={**_signed(service), **headers})
        response = conn.getresponse()
        data = response.read()
        assert response.status == 200, (method, path, response.status, data[:300])
        assert response.getheader("Connection") is None and not response.will_close
        return data

    target = {"X-Amz-Target": "DynamoDB_20120810.ListTables", "Content-Type": "application/x-amz-json-1.0"}
    assert b"TableNames" in call("POST", "/", "dynamodb", b"{}", **target)
    sock = conn.sock
    call("PUT", bucket, "s3")
    call("PUT", f"{bucket}/a", "s3", b"hello world", Expect="100-continue")
    assert call("HEAD", f"{bucket}/a", "s3") == b""
    assert call("GET", f"{bucket}/a", "s3") == b"hello world"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert b"ListQueuesResponse" in call("POST", "/", "sqs", b"Action=ListQueues&Version=2012-11-05", **form)
    assert conn.sock is sock  # one connection all along

    conn.putrequest("PUT", f"{bucket}/chunked")
    for name, value in {**_signed("s3"), "Transfer-Encoding": "chunked"}.items():
        conn.putheader(name, value)
    conn.endheaders()
    conn.send(b"5\r\nhello\r\n0\r\n\r\n")
    response = conn.getresponse()
    response.read()
    assert response.status == 200 and response.will_close
    conn.close()
    assert call("GET", f"{bucket}/chunked", "s3") == b"hello"
    conn.close()


def test_unique_names_are_unique_and_valid(unique_name):
    names = {unique_name("stream") for _ in range(100)}
    assert len(names) == 100
    long_name = unique_name("x" * 80)
    for name in [*names, long_name, unique_name("")]:
        assert 3 <= len(name) <= 63 and name == name.lower(), name
        assert all(c.isalnum() or c == "-" for c in name), name
        assert not name.startswith("-") and not name.endswith("-"), name
