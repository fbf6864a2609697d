"""The start-up checks of ``create_worker`` name what the user set: the typed ``WorkerConfig``'s fields
(``streams``, ``lease_table``, ``checkpoint_table``, ``processing.dlq_url``) when a typed config is given, and
the variables, exactly as before and as ``python -m consumer run`` prints them, when the settings come from
the environment. Before, a typed config's missing stream, table or queue was reported as ``CONSUMER_STREAMS``,
``CONSUMER_LEASE_TABLE`` ... : variables its user never set."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from consumer import (
    BaseProcessor,
    ConfigError,
    ConsumerError,
    MissingResourceError,
    ProcessingConfig,
    ProcessRecordsInput,
    StreamSpec,
    WorkerConfig,
    create_worker,
)

from .support import create_stream, make_names

pytestmark = pytest.mark.integration

# Each variable and the typed field that sets the same thing.
FIELDS = {
    "CONSUMER_STREAMS": "streams",
    "CONSUMER_LEASE_TABLE": "lease_table",
    "CONSUMER_CHECKPOINT_TABLE": "checkpoint_table",
    "CONSUMER_DLQ_URL": "processing.dlq_url",
}


class Orders(BaseProcessor):
    def process_records(self, data: ProcessRecordsInput) -> None:
        return None


@dataclasses.dataclass
class Case:
    name: str
    error: type[ConsumerError]
    typed: dict[str, Any]  # WorkerConfig changes
    env: dict[str, str]  # the same setting as variables
    message: str  # what the environment's error says (today's text), with {placeholders} filled in


def _typed_terms(message: str) -> str:
    for variable, field in FIELDS.items():
        message = message.replace(variable, field)
    return message


def test_a_typed_config_names_its_fields_and_the_environment_its_variables(
    emulators: Any, kinesis_client: Any, dynamodb_client: Any, unique_name: Callable[..., str]
) -> None:
    names = make_names(unique_name, dynamodb_client)
    create_stream(kinesis_client, names.stream, 1)
    wrong_keys = unique_name("wrongkey")
    dynamodb_client.create_table(
        TableName=wrong_keys,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "N"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # Two tables in use (a worker item in the lease table, a checkpoint in the other), to be given swapped.
    used = make_names(unique_name, dynamodb_client)
    dynamodb_client.put_item(
        TableName=used.lease_table,
        Item={"lease_key": {"S": "worker#w1"}, "item_type": {"S": "worker"}},
    )
    dynamodb_client.put_item(
        TableName=used.checkpoint_table,
        Item={"lease_key": {"S": f"{names.stream}#shardId-000000000000"}, "epoch": {"N": "1"}},
    )
    missing_stream, missing_table = unique_name("nostream"), unique_name("notable")
    missing_queue = f"{emulators.aws_endpoint}/123456789012/{unique_name('noq')}"
    cases = [
        Case(
            "missing stream",
            MissingResourceError,
            {"streams": (StreamSpec(missing_stream, Orders),)},
            {"CONSUMER_STREAMS": missing_stream},
            f"CONSUMER_STREAMS: Kinesis stream {missing_stream!r} does not exist (in this region and account). "
            f"Create it with `aws kinesis create-stream --stream-name {missing_stream} --shard-count N` or "
            "deploy the streaming stack, or fix CONSUMER_STREAMS.",
        ),
        Case(
            "missing lease table",
            MissingResourceError,
            {"lease_table": missing_table},
            {"CONSUMER_LEASE_TABLE": missing_table},
            f"CONSUMER_LEASE_TABLE: DynamoDB table {missing_table!r} does not exist. Create it with `python -m "
            "consumer create-tables --lease-table ... --checkpoint-table ...` (local use) or deploy the state "
            "stack, or fix CONSUMER_LEASE_TABLE.",
        ),
        Case(
            "missing checkpoint table",
            MissingResourceError,
            {"checkpoint_table": missing_table},
            {"CONSUMER_CHECKPOINT_TABLE": missing_table},
            f"CONSUMER_CHECKPOINT_TABLE: DynamoDB table {missing_table!r} does not exist. Create it with "
            "`python -m consumer create-tables --lease-table ... --checkpoint-table ...` (local use) or deploy "
            "the state stack, or fix CONSUMER_CHECKPOINT_TABLE.",
        ),
        Case(
            "wrong key",
            ConfigError,
            {"lease_table": wrong_keys},
            {"CONSUMER_LEASE_TABLE": wrong_keys},
            f"CONSUMER_LEASE_TABLE: DynamoDB table {wrong_keys!r} has the key id (N, HASH); the consumer needs "
            "the hash key lease_key (S) and no sort key. Point CONSUMER_LEASE_TABLE at a table made by "
            "`python -m consumer create-tables` or the state stack.",
        ),
        Case(
            "swapped tables",
            ConfigError,
            {"lease_table": used.checkpoint_table, "checkpoint_table": used.lease_table},
            {"CONSUMER_LEASE_TABLE": used.checkpoint_table, "CONSUMER_CHECKPOINT_TABLE": used.lease_table},
            f"CONSUMER_LEASE_TABLE: DynamoDB table {used.checkpoint_table!r} holds checkpoints (item "
            f"'{names.stream}#shardId-000000000000'): are CONSUMER_LEASE_TABLE and CONSUMER_CHECKPOINT_TABLE "
            "swapped?",
        ),
        Case(
            "missing queue",
            MissingResourceError,
            {"processing": ProcessingConfig(on_failure="dlq", dlq_url=missing_queue)},
            {"CONSUMER_ON_FAILURE": "dlq", "CONSUMER_DLQ_URL": missing_queue},
            f"CONSUMER_DLQ_URL: SQS queue {missing_queue!r} does not exist; create it (the state stack does) "
            "or fix CONSUMER_DLQ_URL",
        ),
        Case(
            "queue name, not a URL",
            ConfigError,
            {"processing": ProcessingConfig(on_failure="dlq", dlq_url="orders-dlq")},
            {"CONSUMER_ON_FAILURE": "dlq", "CONSUMER_DLQ_URL": "orders-dlq"},
            "CONSUMER_DLQ_URL: must be an SQS queue URL (https://sqs.REGION.amazonaws.com/...), got 'orders-dlq'",
        ),
    ]
    config = WorkerConfig(
        application="embed-names",
        lease_table=names.lease_table,
        checkpoint_table=names.checkpoint_table,
        streams=(StreamSpec(names.stream, Orders),),
    )
    env = {
        "CONSUMER_APPLICATION": "embed-names",
        "CONSUMER_STREAMS": names.stream,
        "CONSUMER_LEASE_TABLE": names.lease_table,
        "CONSUMER_CHECKPOINT_TABLE": names.checkpoint_table,
    }
    credentials = emulators.env()
    session = boto3.Session(
        aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
    )
    where = {
        "session": session,
        "region": emulators.region,
        "endpoints": {"kinesis": emulators.kinesis_endpoint, "dynamodb": emulators.aws_endpoint},
        "endpoint_url": emulators.aws_endpoint,  # SQS
    }
    for case in cases:
        with pytest.raises(case.error) as from_env:
            create_worker(env={**env, **case.env}, processor=Orders, **where)
        assert str(from_env.value) == case.message, case.name  # the variables, word for word as before

        with pytest.raises(case.error) as typed:
            create_worker(dataclasses.replace(config, **case.typed), **where)
        assert str(typed.value) == _typed_terms(case.message), case.name
        assert "CONSUMER_" not in str(typed.value), case.name
        if isinstance(typed.value, ConfigError):
            assert typed.value.field == _typed_terms(getattr(from_env.value, "field", "")), case.name
    # Every refusal came before the worker registered: the lease table holds nothing.
    assert dynamodb_client.scan(TableName=names.lease_table, ConsistentRead=True)["Items"] == []
