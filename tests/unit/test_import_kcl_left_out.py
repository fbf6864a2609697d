"""import-kcl without AWS: leases of a former stream of the same name, leases of expired shards, two leases for
one shard, and ``--timestamp`` as the KCL writes it (audit D1, D4, D5). Kinesis is a fake that counts its
calls; the same paths run over the network in tests/integration/test_import_kcl_incarnations.py."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from consumer.errors import ConfigError
from consumer.kcl.command import parse_kcl_timestamp
from consumer.kcl.lease_table import KclLease, read_kcl_leases
from consumer.kcl.stream_check import check_streams

_CREATED = datetime(2026, 5, 1, 12, 0, 0, 600000, tzinfo=UTC)  # the stream as it is now
_EPOCH = int(_CREATED.timestamp())  # what the KCL keeps: whole seconds


class _Kinesis:
    """A stream ``orders`` listing ``shards`` (each open, sequence numbers 100 onwards)."""

    def __init__(self, shards: tuple[str, ...]) -> None:
        self.shards = shards
        self.calls: Counter[str] = Counter()

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        self.calls["ListShards"] += 1
        return {
            "Shards": [
                {"ShardId": s, "SequenceNumberRange": {"StartingSequenceNumber": "100"}} for s in self.shards
            ]
        }

    def describe_stream_summary(self, StreamName: str) -> dict[str, Any]:
        self.calls["DescribeStreamSummary"] += 1
        return {"StreamDescriptionSummary": {"StreamName": StreamName, "StreamCreationTimestamp": _CREATED}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.calls["GetShardIterator"] += 1
        return {"ShardIterator": "it"}


def _multi(shard: str, checkpoint: str, epoch: int = _EPOCH) -> KclLease:
    key = f"123456789012:orders:{epoch}:{shard}"
    return KclLease(key, "orders", shard, checkpoint, 0, (), "kcl-1", 3, creation_epoch=epoch)


def _single(shard: str, checkpoint: str) -> KclLease:
    return KclLease(shard, "orders", shard, checkpoint, 0, (), "kcl-1", 3)


def test_the_creation_epoch_of_a_multi_stream_key_is_read() -> None:
    class _Table:
        def scan(self, **kwargs: Any) -> dict[str, Any]:
            return {
                "Items": [
                    {
                        "leaseKey": {"S": f"1:orders:{_EPOCH}:shardId-000000000000"},
                        "checkpoint": {"S": "LATEST"},
                    },
                    {
                        "leaseKey": {"S": "1:orders:1690000000:shardId-000000000000"},
                        "checkpoint": {"S": "LATEST"},
                    },
                ]
            }

    leases = read_kcl_leases(_Table(), "T", None)
    assert [(lease.shard_id, lease.creation_epoch) for lease in leases] == [
        ("shardId-000000000000", _EPOCH),
        ("shardId-000000000000", 1690000000),
    ]


def test_leases_of_a_former_stream_are_left_out_and_said_so_with_one_describe_per_stream() -> None:
    """Before: both became orders/shardId-000000000000 and the first in scan order won without a word; an old
    SHARD_END ended the live shard."""
    kinesis = _Kinesis(("shardId-000000000000", "shardId-000000000001"))
    leases = [
        _multi("shardId-000000000000", "SHARD_END", epoch=1690000000),
        _multi("shardId-000000000000", "140"),
        _multi("shardId-000000000001", "999", epoch=1690000000),  # no position in the live shard: never asked
        _multi("shardId-000000000001", "TRIM_HORIZON", epoch=_EPOCH + 1),  # rounded up by its writer: live
    ]
    keep, left = check_streams(leases, kinesis)
    assert [(k.shard_id, k.checkpoint) for k in keep] == [
        ("shardId-000000000000", "140"),
        ("shardId-000000000001", "TRIM_HORIZON"),
    ]
    assert [(o.kcl.shard_id, o.kcl.checkpoint) for o in left] == [
        ("shardId-000000000000", "SHARD_END"),
        ("shardId-000000000001", "999"),
    ]
    line = left[0].line()
    assert line.startswith(
        "orders/shardId-000000000000: KCL SHARD_END, owner kcl-1: left out "
        "(lease 123456789012:orders:1690000000:shardId-000000000000): a former stream 'orders'"
    ), line
    assert f"the stream now was created {_EPOCH} = 2026-05-01T12:00:00Z" in line, line
    assert kinesis.calls == {"ListShards": 1, "DescribeStreamSummary": 1, "GetShardIterator": 1}


def test_single_stream_keys_cost_no_describe() -> None:
    kinesis = _Kinesis(("shardId-000000000000",))
    keep, left = check_streams([_single("shardId-000000000000", "LATEST")], kinesis)
    assert (len(keep), left, kinesis.calls["DescribeStreamSummary"]) == (1, [], 0)


def test_two_leases_left_for_one_shard_are_refused_in_one_line() -> None:
    kinesis = _Kinesis(("shardId-000000000000",))
    leases = [_multi("shardId-000000000000", "LATEST"), _single("shardId-000000000000", "TRIM_HORIZON")]
    with pytest.raises(
        ConfigError, match=r"^--kcl-table: 2 KCL leases map to orders/shardId-000000000000 \("
    ):
        check_streams(leases, kinesis)


def test_an_epoch_after_the_streams_creation_is_refused() -> None:
    kinesis = _Kinesis(("shardId-000000000000",))
    with pytest.raises(
        ConfigError, match=r"^--kcl-table: KCL lease .*: creationEpoch .* is after stream 'orders'"
    ):
        check_streams([_multi("shardId-000000000000", "LATEST", epoch=_EPOCH * 1000)], kinesis)


def test_a_lease_of_a_shard_older_than_every_listed_one_looks_expired_and_can_be_left_out() -> None:
    """Before: ``has no shard ...: is it the KCL application's stream?`` and no way past it."""
    kinesis = _Kinesis(("shardId-000000000003", "shardId-000000000004"))
    expired = _single("shardId-000000000001", "TRIM_HORIZON")
    with pytest.raises(ConfigError) as caught:
        check_streams([expired], kinesis)
    text = str(caught.value)
    assert text.startswith(
        "--leave-out-expired: Kinesis stream 'orders' no longer lists shard shardId-000000000001"
    )
    assert "older than every shard it lists (the oldest: shardId-000000000003): it looks expired" in text, (
        text
    )
    keep, left = check_streams(
        [expired, _single("shardId-000000000004", "LATEST")], kinesis, leave_out_expired=True
    )
    assert [k.shard_id for k in keep] == ["shardId-000000000004"]
    assert [o.line() for o in left] == [
        "orders/shardId-000000000001: KCL TRIM_HORIZON, owner kcl-1: left out (lease shardId-000000000001): its "
        "shard is no longer listed and is older than every listed shard (the oldest: shardId-000000000003): "
        "expired past the retention period before the KCL finished it (--leave-out-expired)"
    ]


def test_a_missing_shard_newer_than_a_listed_one_is_still_the_wrong_stream_and_shard_end_is_listed() -> None:
    kinesis = _Kinesis(("shardId-000000000000",))
    with pytest.raises(
        ConfigError, match=r"^--stream: Kinesis stream 'orders' has no shard shardId-000000000077"
    ):
        check_streams([_single("shardId-000000000077", "LATEST")], kinesis, leave_out_expired=True)
    keep, left = check_streams([_single("shardId-000000000077", "SHARD_END")], kinesis)
    assert keep == [] and "left out (lease shardId-000000000077): finished" in left[0].line()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1577836800", datetime(2020, 1, 1, tzinfo=UTC)),
        ("1577836800.25", datetime(2020, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)),
        ("2020-01-01T00:00:00Z", datetime(2020, 1, 1, tzinfo=UTC)),
    ],
)
def test_timestamp_takes_epoch_seconds_as_the_kcl_keeps_them_or_iso(raw: str, expected: datetime) -> None:
    """Before: the hint said to give initialPositionInStreamExtended, and its epoch seconds were refused."""
    assert parse_kcl_timestamp(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("yesterday", r"^--timestamp: must be epoch seconds .* or ISO-8601 with a time zone"),
        ("2020-01-01T00:00:00", r"^--timestamp: '2020-01-01T00:00:00' has no time zone"),
        ("-5", r"^--timestamp: must be epoch seconds >= 0"),
        ("nan", r"^--timestamp: must be epoch seconds >= 0"),
    ],
)
def test_a_timestamp_that_is_neither_is_one_line(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_kcl_timestamp(raw)


def test_a_stream_none_of_whose_leases_carries_its_creation_time_is_refused_not_left_out_whole() -> None:
    """Leaving every lease out would start a live application's shards at the fleet's initial position."""
    kinesis = _Kinesis(("shardId-000000000000", "shardId-000000000001"))
    leases = [
        _multi("shardId-000000000000", "140", epoch=1690000000),
        _multi("shardId-000000000001", "SHARD_END", epoch=1690000000),
    ]
    with pytest.raises(ConfigError) as caught:
        check_streams(leases, kinesis)
    message = str(caught.value)
    assert message.startswith(
        "--kcl-table: none of the 2 KCL leases of stream 'orders' carries its creation time"
    )
    assert "theirs: 1690000000 = 2023-07-22T04:26:40Z" in message
    assert "import the other streams with --stream" in message
