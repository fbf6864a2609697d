"""The EMR Serverless application that runs ``spark_jobs`` and the role its job runs assume."""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import AnalyticsSettings
from stacks.nag import LOG_GROUP_NOT_KMS, skip_checkov
from stacks.retention import log_retention

__all__ = ["SparkApplication"]


class SparkApplication(Construct):
    """A Spark application that starts on job submission and stops after 15 idle minutes.

    ``job_role`` has no permissions of its own; the stack grants it read on raw, write on curated and read on
    the job code.
    """

    def __init__(
        self, scope: Construct, id: str, *, name: str, settings: AnalyticsSettings, log_retention_days: int
    ) -> None:
        super().__init__(scope, id)
        self.application = emrs.CfnApplication(
            self,
            "Application",
            name=name,
            release_label=settings.emr_release_label,
            type="SPARK",
            architecture="ARM64",
            auto_start_configuration=emrs.CfnApplication.AutoStartConfigurationProperty(enabled=True),
            auto_stop_configuration=emrs.CfnApplication.AutoStopConfigurationProperty(
                enabled=True, idle_timeout_minutes=15
            ),
            maximum_capacity=emrs.CfnApplication.MaximumAllowedResourcesProperty(
                cpu=f"{settings.max_vcpu} vCPU", memory=f"{settings.max_memory_gb} GB"
            ),
        )
        self.application_id = self.application.attr_application_id
        self.application_arn = self.application.attr_arn
        self.log_group = logs.LogGroup(
            self,
            "JobLogs",
            retention=log_retention(log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        skip_checkov(self.log_group, LOG_GROUP_NOT_KMS)
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"),
            description="Spark job runs: read raw, write curated",
        )
        self.log_group.grant_write(self.job_role)
        # EMR Serverless's CloudWatch logging looks the group and its streams up before writing to them.
        self.job_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["logs:DescribeLogStreams"], resources=[self.log_group.log_group_arn])
        )
        all_log_groups = Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.job_role.add_to_principal_policy(
            iam.PolicyStatement(actions=["logs:DescribeLogGroups"], resources=[all_log_groups])
        )
        NagSuppressions.add_resource_suppressions(
            self.job_role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "logs:DescribeLogGroups lists log groups by name prefix: it is authorized on the "
                    "account's log-group namespace, not on one group. It reads names and settings, no log data.",
                    "applies_to": [
                        "Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:*"
                    ],
                }
            ],
            apply_to_children=True,
        )
