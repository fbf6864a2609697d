"""One reading of a throttle: the one-shot calls' retries (``ThrottleRetries``) try a call again exactly when
the classifier (``classify``) makes its failure a ``ThrottledError``, for every answer either knows of, per
service (the same code can be a throttle in one service and a refusal in another). The network case
(a throttled DynamoDB transaction) is ``tests/integration/test_command_throttles.py``."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from consumer.aws import ThrottleRetries
from consumer.aws_errors import RETRIABLE_CODES, THROTTLE_CODES, classify
from consumer.errors import ThrottledError

OPERATIONS = {
    "dynamodb": "TransactWriteItems",
    "kinesis": "ListShards",
    "s3": "PutObject",
    "sqs": "SendMessage",
}


def _operation(service: str) -> Any:
    client = boto3.session.Session().client(service, region_name="us-east-1")
    return client.meta.service_model.operation_model(OPERATIONS[service])


def _answers() -> list[dict[str, Any]]:
    codes = sorted(
        RETRIABLE_CODES | {"ResourceInUseException", "ValidationException", "AccessDeniedException"}
    )
    answers: list[dict[str, Any]] = [{"Error": {"Code": c, "Message": "m"}} for c in codes]
    for reasons in (
        ["ThrottlingError"],
        ["None", "ProvisionedThroughputExceeded"],
        ["ConditionalCheckFailed"],
        ["TransactionConflict"],
    ):
        answers.append(
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "m"},
                "CancellationReasons": [{"Code": r} for r in reasons],
            }
        )
    return answers


@pytest.mark.parametrize("service", sorted(OPERATIONS))
def test_the_retries_of_one_shot_calls_and_the_classifier_agree_on_what_a_throttle_is(service: str) -> None:
    operation = _operation(service)
    retries = ThrottleRetries()
    throttles = 0
    for answer in _answers():
        classified = isinstance(classify(ClientError(answer, operation.name), service), ThrottledError)
        retried = retries(response=(None, answer), attempts=1, operation=operation) is not None
        assert retried == classified, (service, answer)
        throttles += classified
    assert throttles >= len(THROTTLE_CODES)


def test_a_throttled_transaction_and_kinesis_own_throttle_are_retried() -> None:
    retries = ThrottleRetries()
    cancelled = {
        "Error": {"Code": "TransactionCanceledException"},
        "CancellationReasons": [{"Code": "ThrottlingError"}],
    }
    assert retries(response=(None, cancelled), attempts=1, operation=_operation("dynamodb")) is not None
    in_use = {"Error": {"Code": "ResourceInUseException"}}
    assert retries(response=(None, in_use), attempts=1, operation=_operation("kinesis")) is not None
    assert retries(response=(None, in_use), attempts=1, operation=_operation("dynamodb")) is None
