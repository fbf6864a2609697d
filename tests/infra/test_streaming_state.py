"""Streams, lease and checkpoint tables, dead-letter queue: keys, encryption, recovery, protection."""

from __future__ import annotations

import pytest

from .cfn import render
from .conftest import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_streams_are_kms_encrypted_in_the_configured_mode(synth: Synth, env: str) -> None:
    configured = {s["name"]: s for s in synth.settings[env]["streams"]}
    streams = synth.resources(env, "streaming", "AWS::Kinesis::Stream")
    assert {s["Properties"]["Name"] for s in streams.values()} == set(configured)
    for stream in streams.values():
        props = stream["Properties"]
        expected = configured[props["Name"]]
        assert props["StreamEncryption"]["EncryptionType"] == "KMS"
        assert render(props["StreamEncryption"]["KeyId"]).startswith("StreamsKey")
        assert props["StreamModeDetails"]["StreamMode"] == expected["capacity_mode"]
        assert props["RetentionPeriodHours"] == expected["retention_hours"]
        if expected["capacity_mode"] == "PROVISIONED":
            assert props["ShardCount"] == expected["shard_count"]
        else:
            assert "ShardCount" not in props
    key = synth.one(env, "streaming", "AWS::KMS::Key")
    assert key["Properties"]["EnableKeyRotation"] is True


def test_prod_has_an_on_demand_stream(synth: Synth) -> None:
    modes = {
        s["Properties"]["StreamModeDetails"]["StreamMode"]
        for s in synth.resources("prod", "streaming", "AWS::Kinesis::Stream").values()
    }
    assert modes == {"ON_DEMAND", "PROVISIONED"}


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_lease_and_checkpoint_tables_match_the_consumer_schema(synth: Synth, env: str) -> None:
    tables = {
        k: t
        for k, t in synth.resources(env, "state", "AWS::DynamoDB::Table").items()
        if not k.startswith("StateProcessorTable")  # the processor's own (test_processor_code.py)
    }
    assert sorted(k.split("Table")[0] for k in tables) == ["StateCheckpoint", "StateLease"]
    protected = env != "dev"
    for table in tables.values():
        props = table["Properties"]
        assert props["KeySchema"] == [{"AttributeName": "lease_key", "KeyType": "HASH"}]
        assert props["AttributeDefinitions"] == [{"AttributeName": "lease_key", "AttributeType": "S"}]
        assert "GlobalSecondaryIndexes" not in props and "LocalSecondaryIndexes" not in props
        assert "StreamSpecification" not in props  # the consumer polls; no DynamoDB stream
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        sse = props["SSESpecification"]
        assert sse["SSEEnabled"] is True and sse["SSEType"] == "KMS"
        assert render(sse["KMSMasterKeyId"]).startswith("StateKey")
        assert props["DeletionProtectionEnabled"] is protected
        assert table["DeletionPolicy"] == ("Retain" if protected else "Delete")


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_dead_letter_queue_is_encrypted_and_ssl_only(synth: Synth, env: str) -> None:
    queue = synth.one(env, "state", "AWS::SQS::Queue")
    assert render(queue["Properties"]["KmsMasterKeyId"]).startswith("StateKey")
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    policy = synth.one(env, "state", "AWS::SQS::QueuePolicy")
    denies = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies)
