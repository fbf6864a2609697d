"""The same DynamoDB requests against moto (over HTTP, metered on the way by the fault proxy) and against the in-memory
client: equal results, equal errors, and equal bills from the proxy and from the in-memory client."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tools.coordination.ledger import Ledger
from tools.coordination.memory_client import InMemoryDynamoDB
from tools.coordination.metering import DynamoDBMeter
from tools.emulators import AwsEndpoints
from tools.tcp_proxy import FaultProxy

pytestmark = pytest.mark.integration


def S(v: str) -> dict[str, str]:
    return {"S": v}


def N(v: int) -> dict[str, str]:
    return {"N": str(v)}


def _requests(t: str) -> list[tuple[str, dict[str, Any]]]:
    key = {"pk": S("a")}
    return [
        (
            "put_item",
            {"TableName": t, "Item": {"pk": S("a"), "n": N(1), "s": {"SS": ["x"]}, "v": S("v" * 1500)}},
        ),
        (
            "put_item",
            {"TableName": t, "Item": {"pk": S("a")}, "ConditionExpression": "attribute_not_exists(pk)"},
        ),
        (
            "update_item",
            {
                "TableName": t,
                "Key": key,
                "UpdateExpression": "SET n = n + :one, #v = :small ADD s :y",
                "ExpressionAttributeNames": {"#v": "v"},
                "ExpressionAttributeValues": {":one": N(1), ":small": S("w"), ":y": {"SS": ["y"]}},
                "ReturnValues": "UPDATED_NEW",
            },
        ),
        (
            "update_item",
            {
                "TableName": t,
                "Key": key,
                "UpdateExpression": "REMOVE v",
                "ConditionExpression": "(n = :two OR n < :zero) AND NOT attribute_exists(gone_attr)",
                "ExpressionAttributeValues": {":two": N(2), ":zero": N(0)},
                "ReturnValues": "ALL_NEW",
            },
        ),
        (
            "update_item",
            {
                "TableName": t,
                "Key": key,
                "UpdateExpression": "SET n = if_not_exists(n, :z)",
                "ConditionExpression": "n >= :big",
                "ExpressionAttributeValues": {":z": N(0), ":big": N(9)},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            },
        ),
        (
            "update_item",
            {
                "TableName": t,
                "Key": {"pk": S("b")},
                "UpdateExpression": "SET c = if_not_exists(c, :z) + :one",
                "ExpressionAttributeValues": {":z": N(0), ":one": N(1)},
                "ReturnValues": "ALL_OLD",
            },
        ),
        ("get_item", {"TableName": t, "Key": key, "ConsistentRead": True}),
        ("get_item", {"TableName": t, "Key": {"pk": S("none")}}),
        (
            "transact_write_items",
            {
                "TransactItems": [
                    {
                        "Update": {
                            "TableName": t,
                            "Key": key,
                            "UpdateExpression": "SET n = n + :one",
                            "ConditionExpression": "n = :two",
                            "ExpressionAttributeValues": {":one": N(1), ":two": N(2)},
                        }
                    },
                    {
                        "ConditionCheck": {
                            "TableName": t,
                            "Key": {"pk": S("b")},
                            "ConditionExpression": "c <> :one",
                            "ExpressionAttributeValues": {":one": N(1)},
                        }
                    },
                ]
            },
        ),
        (
            "transact_write_items",
            {
                "TransactItems": [
                    {
                        "Update": {
                            "TableName": t,
                            "Key": key,
                            "UpdateExpression": "SET n = n + :one",
                            "ConditionExpression": "n = :two",
                            "ExpressionAttributeValues": {":one": N(1), ":two": N(2)},
                        }
                    },
                    {"Delete": {"TableName": t, "Key": {"pk": S("b")}}},
                ]
            },
        ),
        ("delete_item", {"TableName": t, "Key": {"pk": S("c")}}),
        (
            "update_item",
            {
                "TableName": t,
                "Key": key,
                "UpdateExpression": "SET n = :v",
                "ExpressionAttributeValues": {":v": N(1), ":unused": N(2)},
            },
        ),
        ("scan", {"TableName": t, "ConsistentRead": True}),
    ]


def _run(client: Any, t: str) -> list[Any]:
    out: list[Any] = []
    for name, req in _requests(t):
        try:
            resp = getattr(client, name)(**req)
            out.append(
                {
                    k: v
                    for k, v in resp.items()
                    if k not in ("ResponseMetadata", "ConsumedCapacity") and v != {}
                }
            )
        except ClientError as exc:
            r = exc.response
            out.append(
                (
                    r["Error"]["Code"],
                    r.get("Item"),
                    [c.get("Code") for c in r.get("CancellationReasons") or []],
                )
            )
    return out


def _ordered(result: Any) -> Any:
    """Scan order is each backend's own."""
    if isinstance(result, dict) and "Items" in result:
        return {**result, "Items": sorted(result["Items"], key=repr)}
    return result


def _bill(ledger: Ledger, table: str) -> dict[str, tuple[float, float]]:
    return {op: (t.read_units, t.write_units) for (tb, op), t in ledger.totals().items() if tb == table}


def test_moto_and_the_in_memory_client_agree_on_results_errors_and_bills(
    emulators: Any, unique_name: Callable[..., str]
) -> None:
    table = unique_name("contract")
    schema = {
        "TableName": table,
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    raw = emulators.client("dynamodb")
    raw.create_table(**schema)
    metered = Ledger(time.monotonic)
    meter = DynamoDBMeter(metered, raw)
    port = int(emulators.aws_endpoint.rsplit(":", 1)[1])
    with FaultProxy(("127.0.0.1", port), meter=meter) as proxy:
        via_proxy = AwsEndpoints(emulators.kinesis_endpoint, proxy.url()).client("dynamodb")
        moto = _run(via_proxy, table)
        assert meter.errors == []
    memory_ledger = Ledger(time.monotonic)
    memory = InMemoryDynamoDB(memory_ledger)
    memory.create_table(**schema)
    mine = _run(memory, table)
    for i, (theirs, ours) in enumerate(zip(moto, mine, strict=True)):
        assert _ordered(theirs) == _ordered(ours), f"request {i} ({_requests(table)[i][0]})"
    assert _bill(metered, table) == _bill(memory_ledger, table)
