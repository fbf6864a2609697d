"""The analytics buckets: raw (the consumer's landing zone), curated (Parquet), job code, and access logs."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import AnalyticsSettings
from stacks.nag import skip_checkov

__all__ = ["DataLake"]


class DataLake(Construct):
    """KMS-encrypted, SSL-only, private, versioned buckets that log access to one access-log bucket.

    Buckets are retained outside dev; in dev they are deleted with the stack (empty them first).
    """

    def __init__(self, scope: Construct, id: str, *, settings: AnalyticsSettings, retain: bool) -> None:
        super().__init__(scope, id)
        self._removal = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        self.key = kms.Key(
            self,
            "Key",
            description="Raw and curated data, Spark job code",
            enable_key_rotation=True,
            removal_policy=self._removal,
        )
        # Server access logs can only be delivered to a bucket encrypted with S3-managed keys.
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(id="expire-logs", expiration=Duration.days(365))],
            removal_policy=self._removal,
        )
        NagSuppressions.add_resource_suppressions(
            self.access_logs,
            [
                {
                    "id": "AwsSolutions-S1",
                    "reason": "This is the access-log destination; logging it to itself would loop.",
                }
            ],
        )
        skip_checkov(
            self.access_logs,
            {
                "CKV_AWS_18": "This is the access-log destination; logging it to itself would loop.",
                "CKV_AWS_21": "Access logs are written once by the S3 logging service and expire after a year; "
                "versions would only keep expired logs and delete markers around.",
            },
        )
        self.raw = self._bucket(
            "Raw",
            [
                s3.LifecycleRule(id="expire-raw", expiration=Duration.days(settings.raw_expiration_days)),
                s3.LifecycleRule(
                    id="abort-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
            ],
        )
        self.curated = self._bucket(
            "Curated",
            [
                s3.LifecycleRule(
                    id="infrequent-access",
                    transitions=[
                        s3.Transition(
                            storage_class=s3.StorageClass.INFREQUENT_ACCESS,
                            transition_after=Duration.days(settings.curated_infrequent_access_days),
                        )
                    ],
                ),
                s3.LifecycleRule(
                    id="abort-uploads", abort_incomplete_multipart_upload_after=Duration.days(1)
                ),
            ],
        )
        self.artifacts = self._bucket("Artifacts", [])

    def _bucket(self, id: str, lifecycle_rules: list[s3.LifecycleRule]) -> s3.Bucket:
        return s3.Bucket(
            self,
            id,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix=f"{id.lower()}/",
            lifecycle_rules=[
                *lifecycle_rules,
                s3.LifecycleRule(id="expire-noncurrent", noncurrent_version_expiration=Duration.days(30)),
            ],
            removal_policy=self._removal,
        )
