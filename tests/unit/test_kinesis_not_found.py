"""A ResourceNotFoundException from Kinesis keeps Kinesis's own words in the error: the stream may be there and
the shard or position not (kinesis-local answers one for a sequence number a shard does not hold), and "does
not exist" alone sent an operator to look for a missing stream that was ACTIVE."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from consumer.errors import MissingResourceError
from consumer.retrieval.kinesis import BotoKinesis


class _NotFound:
    def __init__(self) -> None:
        self.error = {
            "Code": "ResourceNotFoundException",
            "Message": "Unable to find record with provided SequenceNumber",
        }

    def get_shard_iterator(self, **_: Any) -> Any:
        raise ClientError({"Error": self.error}, "GetShardIterator")

    def get_records(self, **_: Any) -> Any:
        raise ClientError({"Error": self.error}, "GetRecords")


def test_a_resource_not_found_says_what_kinesis_said() -> None:
    kinesis = BotoKinesis(_NotFound())
    with pytest.raises(MissingResourceError) as err:
        kinesis.get_shard_iterator("orders", "shardId-000000000000", "AFTER_SEQUENCE_NUMBER", sequence="49")
    assert str(err.value).startswith(
        "Kinesis stream 'orders' does not exist (or is not ACTIVE) (Kinesis: ResourceNotFoundException: Unable "
        "to find record with provided SequenceNumber). Create it with"
    ), err.value
    with pytest.raises(MissingResourceError, match=r"\(Kinesis: ResourceNotFoundException: Unable to find"):
        kinesis.get_records("iterator", 100)
