"""BatchGetItem under throttling: DynamoDB answers the keys it could not read in ``UnprocessedKeys`` (a throttled
partition) and asks callers to back off. A worker's read of its own leases must not send the same keys again
and again in a tight loop on the coordinator's thread: after a few rounds without progress it is a throttle,
which the coordinator's retry policy backs off."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.errors import ThrottledError
from consumer.leases.dynamodb import DynamoDBLeaseRepository
from consumer.lifecycle import retry

TABLE = "leases"


def _lease_item(shard: str) -> dict[str, Any]:
    return {
        "lease_key": {"S": f"shard#s#{shard}"},
        "item_type": {"S": "lease"},
        "stream": {"S": "s"},
        "shard_id": {"S": shard},
        "epoch": {"N": "1"},
        "state": {"S": "ACTIVE"},
        "parents": {"L": []},
    }


class _ThrottledBatchGet:
    """A DynamoDB client whose BatchGetItem serves ``served_per_call`` keys a call at most (then none at all
    once ``dry_after`` calls have been made), answering the rest as unprocessed, as a throttled partition does."""

    def __init__(self, served_per_call: int, dry_after: int = 10**9, give_up_after: int = 200) -> None:
        self.calls = 0
        self.served_per_call = served_per_call
        self.dry_after = dry_after
        self.give_up_after = give_up_after

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        if self.calls > self.give_up_after:  # the old code's loop never ends: stop it so that the test fails
            raise AssertionError(f"BatchGetItem sent {self.calls} times for the same unprocessed keys")
        keys = RequestItems[TABLE]["Keys"]
        assert len(keys) <= 100, "BatchGetItem takes at most 100 keys"
        n = 0 if self.calls > self.dry_after else self.served_per_call
        served, rest = keys[:n], keys[n:]
        page: dict[str, Any] = {
            "Responses": {TABLE: [_lease_item(k["lease_key"]["S"].split("#")[2]) for k in served]}
        }
        if rest:
            page["UnprocessedKeys"] = {TABLE: {"Keys": rest, "ConsistentRead": True}}
        return page


def _keys(n: int) -> tuple[str, ...]:
    return tuple(f"shard#s#shardId-{i:012d}" for i in range(n))


def test_partial_progress_reads_every_key() -> None:
    """Unprocessed keys that do get served, a few at a time, are all read (250 keys: three batches of 100)."""
    client = _ThrottledBatchGet(served_per_call=40)
    repo = DynamoDBLeaseRepository(client, TABLE, "checkpoints")
    leases = repo.get_leases(_keys(250))
    assert sorted(x.shard_id for x in leases) == sorted(k.split("#")[2] for k in _keys(250))


def test_no_progress_is_a_throttle_not_a_tight_loop() -> None:
    """Keys that stay unprocessed end the read with ThrottledError after a few requests (retriable: the
    coordinator backs it off), instead of being sent again at once, forever."""
    client = _ThrottledBatchGet(served_per_call=30, dry_after=2)
    repo = DynamoDBLeaseRepository(client, TABLE, "checkpoints")
    with pytest.raises(ThrottledError, match="UnprocessedKeys") as raised:
        repo.get_leases(_keys(150))
    assert client.calls <= 2 + 4  # two that served some, then a bounded number of empty rounds
    assert retry.operation(raised.value) == "BatchGetItem"  # counted as Throttles.BatchGetItem
