"""Which transport failures prove that a request never reached the service (``UnreachableError.unsent``): the
heartbeat lane retries those fast even once its window has closed (tests/unit/test_lanes.py)."""

from __future__ import annotations

import pytest
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from consumer.aws_errors import classify
from consumer.errors import UnreachableError

URL = "http://127.0.0.1:1"


@pytest.mark.parametrize(
    ("failure", "unsent"),
    [
        (EndpointConnectionError(endpoint_url=URL), True),  # refused: no connection
        (ConnectTimeoutError(endpoint_url=URL), True),  # no connection within the connect timeout
        (ConnectionClosedError(endpoint_url=URL), False),  # reset: the request may have been sent
        (ReadTimeoutError(endpoint_url=URL), False),  # sent, no answer: it may have been applied
    ],
    ids=lambda x: type(x).__name__ if not isinstance(x, bool) else str(x),
)
def test_only_a_connection_never_made_counts_as_unsent(failure: Exception, unsent: bool) -> None:
    error = classify(failure, "dynamodb", "heartbeat w on leases")
    assert isinstance(error, UnreachableError)
    assert error.unsent is unsent
    assert "cannot reach DynamoDB" in str(error)
