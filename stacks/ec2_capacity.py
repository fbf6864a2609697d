"""EC2 capacity for the ECS cluster: an Auto Scaling group registered as a managed capacity provider."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import CapacitySettings

__all__ = ["Ec2Capacity"]


class Ec2Capacity(Construct):
    """ECS-optimized AL2023 instances with managed scaling, termination protection and instance draining.

    The termination lifecycle hook holds a terminating instance for ``termination_hook_timeout_seconds``,
    which the settings guarantee to exceed the task stop timeout: ECS drains the instance (SIGTERM, the
    worker hands its leases off, SIGKILL only after the stop timeout) before the instance goes away.
    """

    def __init__(
        self, scope: Construct, id: str, *, cluster: ecs.Cluster, vpc: ec2.IVpc, settings: CapacitySettings
    ) -> None:
        super().__init__(scope, id)
        self.auto_scaling_group = autoscaling.AutoScalingGroup(
            self,
            "Instances",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            instance_type=ec2.InstanceType(settings.instance_type),
            machine_image=ecs.EcsOptimizedImage.amazon_linux2023(),
            min_capacity=settings.min_instances,
            max_capacity=settings.max_instances,
            require_imdsv2=True,
            block_devices=[
                autoscaling.BlockDevice(
                    device_name="/dev/xvda",
                    volume=autoscaling.BlockDeviceVolume.ebs(
                        30, encrypted=True, volume_type=autoscaling.EbsDeviceVolumeType.GP3
                    ),
                )
            ],
        )
        self.termination_hook = self.auto_scaling_group.add_lifecycle_hook(
            "DrainBeforeTermination",
            lifecycle_transition=autoscaling.LifecycleTransition.INSTANCE_TERMINATING,
            heartbeat_timeout=Duration.seconds(settings.termination_hook_timeout_seconds),
            default_result=autoscaling.DefaultResult.CONTINUE,
        )
        self.capacity_provider = ecs.AsgCapacityProvider(
            self,
            "CapacityProvider",
            auto_scaling_group=self.auto_scaling_group,
            enable_managed_scaling=True,
            enable_managed_termination_protection=True,
            enable_managed_draining=True,
            target_capacity_percent=100,
        )
        cluster.add_asg_capacity_provider(self.capacity_provider)
        NagSuppressions.add_resource_suppressions(
            self.auto_scaling_group.role,
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "The ECS agent's calls (ecs:Poll, ecs:Submit*, ecs:DiscoverPollEndpoint, "
                    "ecr:GetAuthorizationToken, its own logs) have no resource-level permissions.",
                    "applies_to": ["Resource::*", "Action::ecs:Submit*"],
                }
            ],
            apply_to_children=True,
        )
        NagSuppressions.add_resource_suppressions(
            self.auto_scaling_group,
            [
                {
                    "id": "AwsSolutions-AS3",
                    "reason": "Instances come and go under ECS managed scaling; their activity history is in "
                    "the group and the fleet's health is alarmed on consumer lag, not on each scaling event.",
                },
            ],
        )
