"""The Kinesis data streams the fleet consumes, encrypted with their own customer managed key."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import StreamSettings

__all__ = ["KinesisStreams"]


class KinesisStreams(Construct):
    """One stream per setting, on-demand or provisioned, KMS-encrypted; ``streams`` maps name to stream."""

    def __init__(
        self, scope: Construct, id: str, *, streams: tuple[StreamSettings, ...], retain: bool
    ) -> None:
        super().__init__(scope, id)
        removal = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        self.key = kms.Key(
            self, "Key", description="Kinesis data streams", enable_key_rotation=True, removal_policy=removal
        )
        self.streams: dict[str, kinesis.Stream] = {}
        for settings in streams:
            on_demand = settings.capacity_mode == "ON_DEMAND"
            stream = kinesis.Stream(
                self,
                settings.name,
                stream_name=settings.name,
                stream_mode=kinesis.StreamMode.ON_DEMAND if on_demand else kinesis.StreamMode.PROVISIONED,
                shard_count=None if on_demand else settings.shard_count,
                retention_period=Duration.hours(settings.retention_hours),
                encryption=kinesis.StreamEncryption.KMS,
                encryption_key=self.key,
                removal_policy=removal,
            )
            self.streams[settings.name] = stream
            NagSuppressions.add_resource_suppressions(
                stream,
                [
                    {
                        "id": "AwsSolutions-KDS3",
                        "reason": "A customer managed key lets its key policy, not only IAM, decide who reads "
                        "the stream; the per-request KMS cost is accepted.",
                    }
                ],
            )
