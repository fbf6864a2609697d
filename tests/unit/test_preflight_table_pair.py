"""The start-up check that the checkpoint table belongs to the lease table (``check_table_pair``), on a fake
DynamoDB: a checkpoint whose lease is absent or at another epoch is refused naming the checkpoint table, but
only once a read of both at once confirms it (read apart, they differ while the fleet moves the lease); one
of an older version (no epoch) or a key the batch read left unprocessed is passed over."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.errors import ConfigError
from consumer.preflight import CONFIG_NAMES, check_table_pair

KEY = "shard#s#shardId-000000000000"


class _Ddb:
    """Answers BatchGetItem from ``batch`` (lease key -> epoch) and TransactGetItems from ``pair``."""

    def __init__(
        self, batch: dict[str, int], pair: tuple[int | None, int | None] = (None, None), unread: bool = False
    ) -> None:
        self.batch, self.pair, self.unread = batch, pair, unread
        self.calls: list[str] = []

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("BatchGetItem")
        [(table, request)] = RequestItems.items()
        if self.unread:
            return {"Responses": {table: []}, "UnprocessedKeys": {table: {"Keys": request["Keys"]}}}
        items = [{"lease_key": {"S": k}, "epoch": {"N": str(e)}} for k, e in self.batch.items()]
        return {"Responses": {table: items}}

    def transact_get_items(self, TransactItems: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append("TransactGetItems")
        return {
            "Responses": [
                {"Item": {"lease_key": {"S": KEY}, "epoch": {"N": str(e)}}} if e is not None else {}
                for e in self.pair
            ]
        }


def _check(ddb: _Ddb, checkpoints: list[dict[str, Any]]) -> None:
    check_table_pair(ddb, "L", "C", checkpoints)


def test_a_pair_passes_with_one_read() -> None:
    ddb = _Ddb({KEY: 4})
    _check(ddb, [{"lease_key": KEY, "epoch": 4}])
    assert ddb.calls == ["BatchGetItem"]


def test_a_checkpoint_without_its_lease_is_refused_naming_the_checkpoint_table() -> None:
    ddb = _Ddb({}, pair=(None, 13))
    with pytest.raises(ConfigError) as err:
        _check(ddb, [{"lease_key": KEY, "epoch": 13}])
    assert str(err.value).startswith(
        f"CONSUMER_CHECKPOINT_TABLE: DynamoDB table 'C' holds checkpoints of leases that 'L' does not hold ({KEY}: "
        "its checkpoint at epoch 13, its lease absent)"
    )
    assert "CONSUMER_LEASE_TABLE and CONSUMER_CHECKPOINT_TABLE" in str(err.value)
    ddb = _Ddb({KEY: 0}, pair=(0, 13))
    with pytest.raises(ConfigError, match=r"^checkpoint_table: .*its lease at epoch 0\)"):
        check_table_pair(ddb, "L", "C", [{"lease_key": KEY, "epoch": 13}], CONFIG_NAMES)


def test_a_lease_that_moved_between_the_two_reads_is_not_refused() -> None:
    ddb = _Ddb({KEY: 5}, pair=(5, 5))  # the checkpoint was read at 4, then the fleet moved both to 5
    _check(ddb, [{"lease_key": KEY, "epoch": 4}])
    assert ddb.calls == ["BatchGetItem", "TransactGetItems"]
    _check(_Ddb({}, pair=(None, None)), [{"lease_key": KEY, "epoch": 4}])  # retired meanwhile: both gone


def test_what_cannot_be_told_is_passed_over() -> None:
    ddb = _Ddb({})
    _check(ddb, [{"lease_key": KEY, "sequence": "1"}])  # an older version's checkpoint: no epoch
    assert ddb.calls == []
    _check(_Ddb({}, unread=True), [{"lease_key": KEY, "epoch": 2}])  # throttled keys: not read, not refused
