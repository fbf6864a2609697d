"""The VPC the consumer fleet runs in: private subnets behind NAT, flow logs on, S3/DynamoDB gateway endpoints."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.nag import LOG_GROUP_NOT_KMS, skip_checkov
from stacks.retention import log_retention

__all__ = ["Network"]


class Network(Construct):
    """A two- or three-AZ VPC. Gateway endpoints keep DynamoDB and S3 traffic (the bulk of it) off the NAT."""

    def __init__(
        self, scope: Construct, id: str, *, max_azs: int, nat_gateways: int, log_retention_days: int
    ) -> None:
        super().__init__(scope, id)
        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=log_retention(log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        skip_checkov(self.flow_log_group, LOG_GROUP_NOT_KMS)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=max_azs,
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(
                    name="workers", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20
                ),
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
                "DynamoDB": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.DYNAMODB),
            },
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
