"""A one-shot call (an operator command's, a worker's start-up checks) is tried again on every throttle that
``consumer.aws_errors`` calls one, over the network: a DynamoDB transaction cancelled by throttling
(``TransactionCanceledException`` with ``ThrottlingError``, as ``replay`` and ``drain`` meet it on a busy
table) was read as a throttle by the classifier but not retried by ``ThrottleRetries``, which read its own list
of codes. Emulators of their own, with a small per-partition write limit (docs/emulators.md)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from consumer.aws import command_client
from tools.emulators import Emulators

pytestmark = pytest.mark.integration

# Write units per second per partition key value, with AWS's 1 s of burst: the bucket holds 0.25 units, a put
# (1 unit) or a transaction of one small item (2) passes only when it is full, and an exhausted key refills in
# 4 s. So the call right after ``_exhaust`` is throttled however slow the machine, and the command's retries
# (18-36 s of them) still get through.
WCU = 0.25


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulators]:
    with Emulators(limits={"dynamodb_partition_wcu": WCU}) as emulators:
        yield emulators


def _exhaust(dynamodb: Any, table: str, key: str) -> None:
    """Write ``key`` until its partition is throttled (one attempt per call: nothing retried here)."""
    for _ in range(50):
        try:
            dynamodb.put_item(TableName=table, Item={"pk": {"S": key}})
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "ThrottlingException"
            return
    raise AssertionError(f"{key!r} was never throttled at {WCU} WCU")


def test_a_transaction_cancelled_by_throttling_is_tried_again_by_a_command_client(
    emu: Emulators, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in emu.endpoints.env().items():
        monkeypatch.setenv(name, value)
    raw = emu.client("dynamodb", retries={"mode": "standard", "total_max_attempts": 1})
    table = f"q-throttles-{uuid.uuid4().hex[:8]}"
    raw.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    put = [{"Put": {"TableName": table, "Item": {"pk": {"S": "hot"}, "n": {"N": "1"}}}}]
    _exhaust(raw, table, "hot")
    with pytest.raises(ClientError) as refused:  # what the command's first attempt meets
        raw.transact_write_items(TransactItems=put)
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert [r["Code"] for r in refused.value.response["CancellationReasons"]] == ["ThrottlingError"]

    client = command_client("dynamodb")  # made first: nothing slow between the exhaustion and the call
    _exhaust(raw, table, "hot")
    with caplog.at_level(logging.WARNING, logger="consumer.aws"):
        client.transact_write_items(TransactItems=put)  # throttled first, then through
    retried = [r for r in caplog.records if r.getMessage() == "call_throttled"]
    assert retried, "the throttled transaction was not tried again"
    assert raw.get_item(TableName=table, Key={"pk": {"S": "hot"}}, ConsistentRead=True)["Item"]["n"] == {
        "N": "1"
    }
