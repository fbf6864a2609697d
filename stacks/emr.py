"""The EMR Serverless application that runs ``spark_jobs`` and the role its job runs assume."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_emrserverless as emrs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.config import AnalyticsSettings
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
        self.job_role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("emr-serverless.amazonaws.com"),
            description="Spark job runs: read raw, write curated",
        )
        self.log_group.grant_write(self.job_role)
