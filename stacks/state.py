"""The consumer's coordination state: lease and checkpoint tables, and the dead-letter queue."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sqs as sqs
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import ProcessorTableSettings

__all__ = ["ConsumerState"]

# The consumer's schema: one string partition key, no sort key, no index (consumer/leases, consumer/checkpoint).
PARTITION_KEY = "lease_key"


class ConsumerState(Construct):
    """Lease table, checkpoint table and DLQ, all under one customer managed key.

    The lease table has no DynamoDB stream: the consumer polls it for membership and hand-off requests.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        deletion_protection: bool,
        processor_table: ProcessorTableSettings | None = None,
    ) -> None:
        super().__init__(scope, id)
        removal = RemovalPolicy.RETAIN if deletion_protection else RemovalPolicy.DESTROY
        self.key = kms.Key(
            self,
            "Key",
            description="Consumer leases, checkpoints and DLQ",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        self.lease_table = self._table("LeaseTable", deletion_protection, removal)
        self.checkpoint_table = self._table("CheckpointTable", deletion_protection, removal)
        # The processor's own table (cdk.json: consumer.processor_table), under the same key.
        self.processor_table = (
            None
            if processor_table is None
            else self._table(
                "ProcessorTable", deletion_protection, removal, partition_key=processor_table.partition_key
            )
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(14),
            removal_policy=removal,
        )
        NagSuppressions.add_resource_suppressions(
            self.dead_letter_queue,
            [
                {
                    "id": "AwsSolutions-SQS3",
                    "reason": "This queue is the dead-letter queue: the consumer sends records it could not "
                    "process here directly; a DLQ for the DLQ would only move the problem.",
                }
            ],
        )

    def _table(
        self, id: str, deletion_protection: bool, removal: RemovalPolicy, partition_key: str = PARTITION_KEY
    ) -> dynamodb.Table:
        # Table, not TableV2: TableV2 cannot render a customer managed key in a region-agnostic stack.
        return dynamodb.Table(
            self,
            id,
            partition_key=dynamodb.Attribute(name=partition_key, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=self.key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=deletion_protection,
            removal_policy=removal,
        )
