"""``consumer.log_retention_days`` reaches the log groups as it is: every retention CloudWatch accepts maps to
itself (15 became 30 and 1096 became 1827: the table rounded up, and lacked five of CloudWatch's values), and
the log groups that follow the setting are the ones docs/infrastructure.md lists."""

from __future__ import annotations

import pytest

from stacks.config import LOG_RETENTION_DAYS

from .conftest import ENVIRONMENTS, Synth

pytestmark = pytest.mark.infra


def test_each_allowed_retention_is_written_as_it_is() -> None:
    from aws_cdk import App, Stack
    from aws_cdk import aws_logs as logs
    from aws_cdk.assertions import Template

    from stacks.retention import log_retention

    stack = Stack(App(), "Retention")
    for days in LOG_RETENTION_DAYS:
        logs.LogGroup(stack, f"Days{days}", retention=log_retention(days))
    groups = Template.from_stack(stack).find_resources("AWS::Logs::LogGroup")
    assert sorted(g["Properties"]["RetentionInDays"] for g in groups.values()) == list(LOG_RETENTION_DAYS)


@pytest.mark.parametrize("days", [15, 1095, 4000])
def test_a_retention_cloudwatch_does_not_offer_is_not_rounded(days: int) -> None:
    from stacks.retention import log_retention

    with pytest.raises(ValueError, match="1096"):
        log_retention(days)


def test_the_setting_lands_in_the_log_groups_the_docs_name(synth: Synth) -> None:
    """The consumer's, the VPC flow logs', the Spark jobs' and the compaction state machine's log groups keep
    ``log_retention_days``; the log group of CDK's BucketDeployment handler (the Spark code upload) keeps CDK's
    own two years, whatever the setting."""
    for env in ENVIRONMENTS:
        days = synth.settings[env]["consumer"]["log_retention_days"]
        retention = {
            logical_id: group["Properties"].get("RetentionInDays")
            for unit in ("consumer", "analytics")
            for logical_id, group in synth.resources(env, unit, "AWS::Logs::LogGroup").items()
        }
        deployment = {k: v for k, v in retention.items() if k.startswith("CustomCDKBucketDeployment")}
        assert list(deployment.values()) == [731], retention
        following = {k.rstrip("0123456789ABCDEF") for k, v in retention.items() if k not in deployment}
        assert following == {"NetworkFlowLogs", "ConsumerLogs", "SparkJobLogs", "CompactionLogs"}, retention
        assert {v for k, v in retention.items() if k not in deployment} == {days}, (env, retention)
