"""EC2 capacity for the ECS cluster: an Auto Scaling group registered as a managed capacity provider."""

from __future__ import annotations

from typing import cast

from aws_cdk import CfnResource
from aws_cdk import aws_autoscaling as autoscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecs as ecs
from cdk_nag import NagSuppressions
from constructs import Construct

from stacks.config import CapacitySettings
from stacks.nag import skip_checkov

__all__ = ["Ec2Capacity"]


class Ec2Capacity(Construct):
    """ECS-optimized AL2023 instances with managed scaling, termination protection and instance draining.

    Scale-in is ECS's: managed termination protection keeps Auto Scaling from picking an instance that still
    runs tasks, and managed draining (its own lifecycle hook, which ECS owns) holds a terminating instance
    until its tasks have stopped (SIGTERM, the worker hands its leases off, SIGKILL only after the task's stop
    timeout). No further hook is added: one without a target would only delay every termination.

    Managed scaling aims at ``target_capacity_percent``; below 100 it keeps spare instances so deployments and
    drains start their new tasks at once. Spot interruption notices drain the instance
    (``ECS_ENABLE_SPOT_INSTANCE_DRAINING``) should the group ever run Spot instances.
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
        self.capacity_provider = ecs.AsgCapacityProvider(
            self,
            "CapacityProvider",
            auto_scaling_group=self.auto_scaling_group,
            enable_managed_scaling=True,
            enable_managed_termination_protection=True,
            enable_managed_draining=True,
            target_capacity_percent=settings.target_capacity_percent,
        )
        # CreateCluster is what makes ECS create its service-linked role in a fresh account; the capacity
        # provider (managed scaling) needs that role, so it waits for the cluster.
        (provider,) = [
            c for c in self.capacity_provider.node.children if isinstance(c, ecs.CfnCapacityProvider)
        ]
        provider.node.add_dependency(cast(CfnResource, cluster.node.default_child))
        cluster.add_asg_capacity_provider(self.capacity_provider)
        # CDK adds this only for groups with a spot price; an operator who turns on Spot later (a mixed
        # instances policy, say) would otherwise get no drain on an interruption notice.
        self.auto_scaling_group.add_user_data(
            "echo ECS_ENABLE_SPOT_INSTANCE_DRAINING=true >> /etc/ecs/ecs.config"
        )
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
        skip_checkov(
            self.auto_scaling_group.role.node.find_child("DefaultPolicy"),
            {
                "CKV_AWS_111": "CDK's ECS instance policy: on EC2 the awslogs driver writes the tasks' logs with the "
                "instance role, and CDK grants logs:CreateLogStream/PutLogEvents on any group (as AWS's "
                "AmazonEC2ContainerServiceforEC2Role does); the cluster actions are scoped to this cluster.",
            },
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
