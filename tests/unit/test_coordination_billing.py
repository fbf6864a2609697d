"""DynamoDB billing rules and the in-memory client's bills, against AWS's documented examples and sizes
computed by hand."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tools.coordination.billing import (
    dollars_per_month,
    item_size,
    number_size,
    page_read_units,
    read_units,
    write_units,
)
from tools.coordination.ledger import Ledger
from tools.coordination.memory_client import InMemoryDynamoDB


def test_item_size_follows_the_documented_rules() -> None:
    assert item_size({"name": {"S": "héllo"}}) == 4 + 6  # UTF-8 bytes of name and value
    assert number_size("12345") == 4  # 5 significant digits: 3 bytes + 1
    assert number_size("1000") == 2  # trailing zeros trimmed
    assert number_size("0.0012") == 2  # leading zeros trimmed
    assert item_size({"n": {"N": "-1.5"}}) == 1 + 2
    assert item_size({"b": {"B": b"\x00\x01\x02"}}) == 1 + 3
    assert item_size({"b": {"B": "AAEC"}}) == 1 + 3  # base64 text (JSON wire form): raw bytes counted
    assert item_size({"t": {"BOOL": True}, "z": {"NULL": True}}) == 2 + 2
    assert item_size({"l": {"L": []}}) == 1 + 3  # an empty list: the 3-byte overhead
    assert item_size({"l": {"L": [{"S": "ab"}, {"N": "7"}]}}) == 1 + 3 + (1 + 2) + (1 + 2)
    assert item_size({"m": {"M": {"k": {"S": "v"}}}}) == 1 + 3 + (1 + 1 + 1)
    assert item_size({"ss": {"SS": ["a", "bc"]}, "ns": {"NS": ["1", "22"]}}) == 2 + 3 + 2 + 2 + 2
    assert item_size(None) == 0


def test_read_and_write_units_follow_the_documented_examples() -> None:
    assert read_units(3500, consistent=True) == 1  # a 3.5 KB item: one 4 KB unit
    assert read_units(10 * 1024, consistent=True) == 3  # 10 KB: three units
    assert read_units(10 * 1024, consistent=False) == 1.5  # eventually consistent: half
    assert read_units(0, consistent=True) == 1  # a missing item still costs the minimum
    # BatchGetItem rounds each item: 1.5 KB + 6.5 KB -> 1 + 2 units, where a Query page of both -> 2.
    assert read_units(1536, True) + read_units(6656, True) == 3
    assert page_read_units([1536, 6656], consistent=True) == 2
    assert page_read_units([40] * 10, consistent=True) == 1  # ten 40-byte items: one unit
    assert write_units(3500) == 4  # a 3.5 KB item: four 1 KB units
    assert write_units(500, 1500) == 2  # the larger of before and after
    assert write_units(0) == 1
    assert dollars_per_month(1_000_000 / 730, 1_000_000 / 730) == pytest.approx(0.75)


def _client() -> tuple[InMemoryDynamoDB, Ledger]:
    ledger = Ledger(lambda: 0.0)
    c = InMemoryDynamoDB(ledger)
    c.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    return c, ledger


def _units(ledger: Ledger, op: str) -> tuple[int, float, float]:
    t = ledger.totals()[("t", op)]
    return t.requests, t.read_units, t.write_units


def test_the_client_bills_writes_by_the_larger_item_and_failed_conditions_too() -> None:
    c, ledger = _client()
    big = "x" * 1500  # pk(2) + "a"(1) + v(1) + 1500 = 1504 bytes: 2 write units
    c.put_item(TableName="t", Item={"pk": {"S": "a"}, "v": {"S": big}})
    assert _units(ledger, "PutItem") == (1, 0, 2)
    c.update_item(
        TableName="t",
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"S": "small"}},
    )
    assert _units(ledger, "UpdateItem") == (1, 0, 2)  # the item before was the larger
    with pytest.raises(ClientError) as err:
        c.put_item(
            TableName="t",
            Item={"pk": {"S": "a"}},
            ConditionExpression="attribute_not_exists(pk)",
        )
    assert err.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert _units(ledger, "PutItem") == (2, 0, 3)  # the refused write consumed a unit as well
    c.delete_item(TableName="t", Key={"pk": {"S": "missing"}})
    assert _units(ledger, "DeleteItem") == (1, 0, 1)
    c.get_item(TableName="t", Key={"pk": {"S": "missing"}})
    c.get_item(TableName="t", Key={"pk": {"S": "a"}}, ConsistentRead=True)
    assert _units(ledger, "GetItem") == (2, 1.5, 0)


def test_transactions_cost_twice_and_condition_checks_count_as_writes() -> None:
    c, ledger = _client()
    c.put_item(TableName="t", Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    items = [
        {
            "Update": {
                "TableName": "t",
                "Key": {"pk": {"S": "a"}},
                "UpdateExpression": "SET n = n + :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": "t",
                "Key": {"pk": {"S": "b"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
    ]
    c.transact_write_items(TransactItems=items)
    assert _units(ledger, "TransactWriteItems") == (2, 0, 4)
    assert c.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"]["n"] == {"N": "2"}
    items[1]["ConditionCheck"]["ConditionExpression"] = "attribute_exists(pk)"
    with pytest.raises(ClientError) as err:
        c.transact_write_items(TransactItems=items)
    assert [r["Code"] for r in err.value.response["CancellationReasons"]] == [
        "None",
        "ConditionalCheckFailed",
    ]
    assert _units(ledger, "TransactWriteItems") == (4, 0, 8)


def test_scan_pages_sum_their_items_and_paginate_with_limit() -> None:
    c, ledger = _client()
    for i in range(5):
        c.put_item(TableName="t", Item={"pk": {"S": f"k{i}"}, "v": {"S": "y" * 2000}})  # 2,005 bytes each
    first = c.scan(TableName="t", Limit=3, ConsistentRead=True)
    assert len(first["Items"]) == 3 and "LastEvaluatedKey" in first
    rest = c.scan(TableName="t", ExclusiveStartKey=first["LastEvaluatedKey"])
    assert len(rest["Items"]) == 2 and "LastEvaluatedKey" not in rest
    # 3 x 2,005 = 6,015 bytes -> 2 units (consistent); 2 x 2,005 = 4,010 -> 1 unit, halved.
    assert _units(ledger, "Scan") == (2, 2.5, 0)
