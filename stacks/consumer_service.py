"""The consumer fleet: an ECS service running the consumer image, scaled on consumer lag."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jsii
from aws_cdk import AspectPriority, Aspects, Duration, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from cdk_nag import NagSuppressions
from constructs import Construct, IConstruct

from stacks.config import EnvironmentSettings
from stacks.ec2_capacity import Ec2Capacity
from stacks.metrics import consumer_lag
from stacks.nag import LOG_GROUP_NOT_KMS, skip_checkov
from stacks.retention import log_retention

__all__ = ["HEALTH_CHECK_COMMAND", "HEALTH_FILE", "ConsumerResources", "ConsumerService"]

# The image's liveness contract (consumer/Dockerfile, consumer/health.py): the worker touches HEALTH_FILE on every
# step of its coordinator loop, and the command fails once the file is older than the bound.
HEALTH_FILE = "/tmp/consumer.heartbeat"
HEALTH_MAX_AGE_SECONDS = 30
HEALTH_CHECK_COMMAND = ("/opt/venv/bin/python", "-m", "consumer", "health")
_ECR_URI = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?/"
    r"(?P<repository>[^:@]+)(:(?P<tag>[^@]+)|@(?P<digest>sha256:[0-9a-f]{64}))$"
)

# Application Auto Scaling acts on ECS services through this service-linked role (created on first use).
_ECS_SCALING_ROLE = "aws-service-role/ecs.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_ECSService"


# Runs after CDK's own mutating aspects (AspectPriority.MUTATING), which create the association.
_AFTER_CDK_MUTATIONS = AspectPriority.MUTATING + 100


@jsii.implements(IAspect)
class _DependOnCapacityProviders:
    """Makes the ECS service depend on its cluster's ``AWS::ECS::ClusterCapacityProviderAssociations``."""

    def __init__(self, cluster: ecs.Cluster) -> None:
        self._cluster = cluster

    def visit(self, node: IConstruct) -> None:
        if not isinstance(node, ecs.CfnService):
            return
        associations = [
            c
            for c in self._cluster.node.children
            if isinstance(c, ecs.CfnClusterCapacityProviderAssociations)
        ]
        if len(associations) != 1:
            raise ValueError(f"{self._cluster.node.path}: expected one capacity provider association")
        node.node.add_dependency(associations[0])


@dataclass(frozen=True)
class ConsumerResources:
    """Names the task is told about through its environment (the stack grants access to the same things)."""

    stream_names: tuple[str, ...]
    lease_table_name: str
    checkpoint_table_name: str
    dead_letter_queue_url: str
    raw_bucket_name: str
    processor_table_name: str | None = None


class ConsumerService(Construct):
    """ECS cluster (Container Insights on), EC2 or Fargate capacity, the consumer task and its step scaling.

    ``task_role`` starts with no permissions; the stack grants it exactly the streams, tables, queue and bucket
    prefix named in ``ConsumerResources``.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        vpc: ec2.IVpc,
        settings: EnvironmentSettings,
        resources: ConsumerResources,
        image_directory: str | None,
    ) -> None:
        super().__init__(scope, id)
        consumer = settings.consumer
        on_ec2 = settings.capacity.launch_type == "EC2"
        self.cluster = ecs.Cluster(
            self, "Cluster", vpc=vpc, container_insights_v2=ecs.ContainerInsights.ENABLED
        )
        self.capacity = (
            Ec2Capacity(self, "Capacity", cluster=self.cluster, vpc=vpc, settings=settings.capacity)
            if on_ec2
            else None
        )
        self.task_definition: ecs.TaskDefinition = (
            ecs.Ec2TaskDefinition(self, "Task", network_mode=ecs.NetworkMode.AWS_VPC)
            if on_ec2
            else ecs.FargateTaskDefinition(
                self, "Task", cpu=consumer.cpu, memory_limit_mib=consumer.memory_mib
            )
        )
        self.task_role = self.task_definition.task_role
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention(consumer.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        skip_checkov(self.log_group, LOG_GROUP_NOT_KMS)
        self.container = self.task_definition.add_container(
            "Consumer",
            image=self._image(settings, image_directory),
            cpu=consumer.cpu,
            memory_limit_mib=consumer.memory_mib,
            essential=True,
            # The worker's own shutdown deadline runs inside this window; SIGKILL comes only after it.
            stop_timeout=Duration.seconds(consumer.stop_timeout_seconds),
            # An init process forwards SIGTERM to the worker and reaps children.
            linux_parameters=ecs.LinuxParameters(self, "Linux", init_process_enabled=True),
            logging=ecs.LogDrivers.aws_logs(stream_prefix="consumer", log_group=self.log_group),
            # Unhealthy once the worker's coordinator loop stops stepping (consumer/health.py): ECS replaces it.
            health_check=ecs.HealthCheck(
                command=["CMD", *HEALTH_CHECK_COMMAND],
                interval=Duration.seconds(30),
                timeout=Duration.seconds(10),
                retries=3,
                start_period=Duration.seconds(60),
            ),
            environment=self._environment(settings, resources),
        )
        self._add_secrets(settings)
        self.security_group = ec2.SecurityGroup(
            self,
            "TaskSecurityGroup",
            vpc=vpc,
            description="Consumer tasks: HTTPS out only",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "AWS APIs over HTTPS")
        self.service = self._service(settings, on_ec2)
        self._scale_on_lag(settings)
        NagSuppressions.add_resource_suppressions(
            self.task_definition,
            [
                {
                    "id": "AwsSolutions-ECS2",
                    "reason": "The environment holds only non-secret configuration (stream, table, queue "
                    "and bucket names, the processor's plain settings); a processor's secrets are ECS secrets "
                    "read from Secrets Manager or SSM (consumer.processor_secrets), and config refuses a "
                    "secret-looking name among the plain ones.",
                }
            ],
        )
        NagSuppressions.add_resource_suppressions(
            self.task_definition.obtain_execution_role(),
            [
                {
                    "id": "AwsSolutions-IAM5",
                    "reason": "ecr:GetAuthorizationToken has no resource-level permissions; image pulls "
                    "themselves are scoped to the asset repository.",
                    "applies_to": ["Resource::*"],
                }
            ],
            apply_to_children=True,
        )

    def _image(self, settings: EnvironmentSettings, directory: str | None) -> ecs.ContainerImage:
        """``consumer.image`` (pulled from its ECR repository, which the execution role may then read, or any
        registry), else the image built from the assembled context (stacks/image_context.py)."""
        uri = settings.consumer.image
        if uri is None:
            assert directory is not None, "an image context is assembled whenever consumer.image is unset"
            return ecs.ContainerImage.from_asset(
                directory,
                file="consumer/Dockerfile",
                platform=ecr_assets.Platform.LINUX_AMD64,
                # The build imports the processor (consumer/install-image.sh): one that does not import
                # fails the image build at deploy, before any task crash-loops on it.
                build_args={"PROCESSOR": settings.consumer.processor},
            )
        match = _ECR_URI.match(uri)
        if match is None:
            return ecs.ContainerImage.from_registry(uri)
        name = match["repository"]
        repository = ecr.Repository.from_repository_attributes(
            self,
            "ProcessorImageRepository",
            repository_arn=Stack.of(self).format_arn(
                service="ecr",
                account=match["account"],
                region=match["region"],
                resource="repository",
                resource_name=name,
            ),
            repository_name=name,
        )
        return ecs.ContainerImage.from_ecr_repository(repository, match["tag"] or match["digest"])

    def _add_secrets(self, settings: EnvironmentSettings) -> None:
        """``consumer.processor_secrets``: ECS reads each at task start into its variable (the template holds
        only the ARN), with the execution role, which may read exactly these, and decrypt with exactly the keys of
        ``consumer.processor_secrets_kms_keys`` through Secrets Manager or SSM."""
        secrets = settings.consumer.processor_secrets
        if not secrets:
            return
        task = self.task_definition.node.default_child
        assert isinstance(task, ecs.CfnTaskDefinition)
        task.add_property_override(
            "ContainerDefinitions.0.Secrets", [{"Name": name, "ValueFrom": arn} for name, arn in secrets]
        )
        # A Secrets Manager valueFrom may add :json-key:version-stage:version-id to the secret's ARN.
        by_service: dict[str, list[str]] = {}
        for _, arn in secrets:
            service = arn.split(":")[2]
            by_service.setdefault(service, []).append(":".join(arn.split(":")[:7]))
        actions = {"secretsmanager": "secretsmanager:GetSecretValue", "ssm": "ssm:GetParameters"}
        role = self.task_definition.obtain_execution_role()
        for service, resources in sorted(by_service.items()):
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=[actions[service]], resources=sorted(set(resources)))
            )
        keys = settings.consumer.processor_secrets_kms_keys
        if keys:
            # A secret (or SecureString) under a customer managed key: ECS's read makes Secrets Manager (or SSM)
            # call kms:Decrypt as the execution role. Allowed on exactly these keys, and only through the
            # services (in the regions) of the secrets.
            via = sorted({f"{arn.split(':')[2]}.{arn.split(':')[3]}.amazonaws.com" for _, arn in secrets})
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["kms:Decrypt"],
                    resources=list(keys),
                    conditions={"StringEquals": {"kms:ViaService": via}},
                )
            )

    def _environment(self, settings: EnvironmentSettings, resources: ConsumerResources) -> dict[str, str]:
        """The ``CONSUMER_*`` contract with the consumer's config loader (consumer/config.py).

        The region goes in both variables: boto3/botocore reads ``AWS_DEFAULT_REGION`` (not ``AWS_REGION``),
        and on the EC2 launch type the ECS agent adds neither when the task definition sets one of them.
        """
        consumer = settings.consumer
        region = Stack.of(self).region
        extra = {"CONSUMER_FANOUT_NAME": consumer.application} if consumer.retrieval == "fanout" else {}
        table = consumer.processor_table
        if table is not None and resources.processor_table_name is not None:
            extra[table.variable] = resources.processor_table_name  # the processor's own table
        return {
            "CONSUMER_APPLICATION": consumer.application,
            "CONSUMER_STREAMS": ",".join(resources.stream_names),
            "CONSUMER_PROCESSOR": consumer.processor,
            "CONSUMER_LEASE_TABLE": resources.lease_table_name,
            "CONSUMER_CHECKPOINT_TABLE": resources.checkpoint_table_name,
            "CONSUMER_DLQ_URL": resources.dead_letter_queue_url,
            "CONSUMER_ON_FAILURE": consumer.on_failure,
            "CONSUMER_LEASE_DURATION_SECONDS": str(consumer.lease_duration_seconds),
            "CONSUMER_SHUTDOWN_DEADLINE_SECONDS": str(consumer.shutdown_deadline_seconds),
            "CONSUMER_RAW_BUCKET": resources.raw_bucket_name,
            "CONSUMER_RAW_PREFIX": consumer.raw_prefix,
            "CONSUMER_RETRIEVAL": consumer.retrieval,
            "CONSUMER_HEALTH_FILE": HEALTH_FILE,
            "CONSUMER_HEALTH_MAX_AGE_SECONDS": str(HEALTH_MAX_AGE_SECONDS),
            **extra,
            **dict(consumer.processor_environment),  # the processor's own plain settings
            "AWS_REGION": region,
            "AWS_DEFAULT_REGION": region,
        }

    def _service(self, settings: EnvironmentSettings, on_ec2: bool) -> ecs.BaseService:
        common = {
            "cluster": self.cluster,
            "vpc_subnets": ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            "security_groups": [self.security_group],
            # New workers start before old ones stop, so leases hand off instead of expiring.
            "min_healthy_percent": 100,
            "max_healthy_percent": 200,
            "circuit_breaker": ecs.DeploymentCircuitBreaker(rollback=True),
        }
        if on_ec2 and self.capacity is not None:
            service: ecs.BaseService = ecs.Ec2Service(
                self,
                "Service",
                task_definition=self.task_definition,
                capacity_provider_strategies=[
                    ecs.CapacityProviderStrategy(
                        capacity_provider=self.capacity.capacity_provider.capacity_provider_name, weight=1
                    )
                ],
                **common,  # type: ignore[arg-type]
            )
        else:
            self.cluster.enable_fargate_capacity_providers()
            service = ecs.FargateService(
                self,
                "Service",
                task_definition=self.task_definition,
                capacity_provider_strategies=[
                    ecs.CapacityProviderStrategy(capacity_provider="FARGATE", weight=1)
                ],
                **common,  # type: ignore[arg-type]
            )
        # The service names a capacity provider, which the cluster must have by then: without this
        # dependency CloudFormation may create the service before the association ("capacity provider is
        # not associated with the cluster") and delete the association first ("capacity provider is in use").
        # CDK creates the association in an aspect at synth, so the dependency is added by one too.
        Aspects.of(service).add(_DependOnCapacityProviders(self.cluster), priority=_AFTER_CDK_MUTATIONS)
        return service

    def _scale_on_lag(self, settings: EnvironmentSettings) -> None:
        """Step scaling on the worst stream's MillisBehindLatest, bounded by shards plus standbys."""
        scaling = settings.scaling
        self.scalable_target = appscaling.ScalableTarget(
            self,
            "TaskCount",
            service_namespace=appscaling.ServiceNamespace.ECS,
            scalable_dimension="ecs:service:DesiredCount",
            resource_id=f"service/{self.cluster.cluster_name}/{self.service.service_name}",
            min_capacity=scaling.min_tasks,
            max_capacity=min(scaling.max_tasks, settings.max_useful_tasks),
            # The service-linked role, as ECS's own auto_scale_task_count uses: without a role the construct
            # creates one that Application Auto Scaling never uses for ECS.
            role=iam.Role.from_role_arn(
                self,
                "ScalingRole",
                Stack.of(self).format_arn(
                    service="iam", region="", resource="role", resource_name=_ECS_SCALING_ROLE
                ),
            ),
        )
        self.scalable_target.node.add_dependency(self.service)
        lag = consumer_lag(settings, period=Duration.minutes(1))
        target = scaling.lag_target_ms

        scale_out = appscaling.StepScalingAction(
            self,
            "ScaleOut",
            scaling_target=self.scalable_target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=Duration.seconds(scaling.scale_out_cooldown_seconds),
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
        )
        # Bounds are relative to the alarm threshold (the lag target): +1 from 1x to 4x the target, +3 above.
        scale_out.add_adjustment(adjustment=1, lower_bound=0, upper_bound=3 * target)
        scale_out.add_adjustment(adjustment=3, lower_bound=3 * target)
        self.scale_out_alarm = cloudwatch.Alarm(
            self,
            "LagAboveTarget",
            metric=lag,
            threshold=target,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
            alarm_description="Consumer lag above the scaling target: add workers",
        )
        self.scale_out_alarm.add_alarm_action(cw_actions.ApplicationScalingAction(scale_out))

        scale_in = appscaling.StepScalingAction(
            self,
            "ScaleIn",
            scaling_target=self.scalable_target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=Duration.seconds(scaling.scale_in_cooldown_seconds),
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
        )
        scale_in.add_adjustment(adjustment=-1, upper_bound=0)
        self.scale_in_alarm = cloudwatch.Alarm(
            self,
            "LagWellBelowTarget",
            metric=lag,
            threshold=target // 10,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=10,
            treat_missing_data=cloudwatch.TreatMissingData.IGNORE,
            alarm_description="Consumer lag under a tenth of the target for 10 minutes: remove a worker",
        )
        self.scale_in_alarm.add_alarm_action(cw_actions.ApplicationScalingAction(scale_in))
