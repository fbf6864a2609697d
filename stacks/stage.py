"""The stacks (which only compose constructs and grant between them) and the per-environment stage."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Aspects, Environment, Fn, Stack, Stage, Tags
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from stacks.compaction import CompactionSchedule
from stacks.config import EnvironmentSettings
from stacks.consumer_service import ConsumerResources, ConsumerService
from stacks.data_lake import DataLake
from stacks.emr import SparkApplication
from stacks.image_context import assemble, processor_project
from stacks.monitoring import FleetMonitoring
from stacks.nag import suppress_bucket_deployment_handler, suppress_cdk_vpc_handler, suppress_grant_wildcards
from stacks.network import Network
from stacks.spark_code import SparkJobsCode
from stacks.state import ConsumerState
from stacks.streaming import KinesisStreams

__all__ = ["FleetStage", "SourcePaths"]

# DynamoDB actions the consumer calls on its lease and checkpoint tables (the repositories, the start-up checks,
# the operator commands); a TransactWriteItems is authorized as the Put/Update/Delete/ConditionCheckItem of its
# items, and a TransactGetItems (the start-up check that the two tables are a pair) as the GetItem of its items.
# It never calls Query or BatchWriteItem (no index, no batch writes).
_TABLE_ACTIONS = (
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:Scan",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:ConditionCheckItem",
)


@dataclass(frozen=True)
class SourcePaths:
    """Where synth finds the code it ships: the repository (``cdk.json``'s folder: the consumer, its locks and
    the processor projects, from which each stage assembles its image's build context) and ``spark_jobs/``."""

    root: Path
    spark_jobs: Path


class StreamingStack(Stack):
    def __init__(self, scope: Construct, id: str, *, settings: EnvironmentSettings, **kwargs: object) -> None:
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        self.kinesis = KinesisStreams(
            self, "Streams", streams=settings.streams, retain=settings.deletion_protection
        )


class StateStack(Stack):
    def __init__(self, scope: Construct, id: str, *, settings: EnvironmentSettings, **kwargs: object) -> None:
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        self.state = ConsumerState(
            self,
            "State",
            deletion_protection=settings.deletion_protection,
            processor_table=settings.consumer.processor_table,
        )


class AnalyticsStack(Stack):
    def __init__(
        self, scope: Construct, id: str, *, settings: EnvironmentSettings, spark_jobs: Path, **kwargs: object
    ) -> None:
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        analytics = settings.analytics
        self.lake = DataLake(self, "DataLake", settings=analytics, retain=settings.deletion_protection)
        self.code = SparkJobsCode(self, "SparkJobs", source=spark_jobs, bucket=self.lake.artifacts)
        self.spark = SparkApplication(
            self,
            "Spark",
            name=f"{settings.consumer.application}-analytics",
            settings=analytics,
            log_retention_days=settings.consumer.log_retention_days,
        )
        # The job role reads raw and the job code, and writes curated: nothing else.
        self.lake.raw.grant_read(self.spark.job_role, f"{settings.consumer.raw_prefix}/*")
        self.lake.curated.grant_read_write(self.spark.job_role)
        self.lake.artifacts.grant_read(self.spark.job_role, "spark/*")
        suppress_grant_wildcards(
            self.spark.job_role,
            objects=[
                f"<DataLakeRaw[0-9A-F]+\\.Arn>\\/{settings.consumer.raw_prefix}\\/\\*",
                "<DataLakeCurated[0-9A-F]+\\.Arn>\\/\\*",
                "<DataLakeArtifacts[0-9A-F]+\\.Arn>\\/spark\\/\\*",
            ],
            reason="Spark reads raw objects under the raw prefix and the job code, and rewrites curated "
            "partitions (dynamic partition overwrite deletes and puts objects); no other bucket or prefix.",
        )
        suppress_bucket_deployment_handler(self)
        self.compaction = CompactionSchedule(
            self,
            "Compaction",
            spark=self.spark,
            code=self.code,
            raw_uri=f"s3://{self.lake.raw.bucket_name}/{settings.consumer.raw_prefix}/",
            curated_uri=f"s3://{self.lake.curated.bucket_name}/curated/",
            quarantine_uri=f"s3://{self.lake.curated.bucket_name}/quarantine/",
            metrics_uri=f"s3://{self.lake.curated.bucket_name}/metrics/",
            settings=analytics,
            log_retention_days=settings.consumer.log_retention_days,
        )


class ConsumerServiceStack(Stack):
    """The VPC, the cluster, its capacity and the consumer service.

    The stack is environment-agnostic, where CDK's ``availability_zones`` returns only two zones (the first
    two of ``Fn::GetAZs``) whatever ``max_azs`` asks for. It returns ``capacity.max_azs`` of them instead:
    CloudFormation picks the zones of the region it deploys to, which must have that many.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: EnvironmentSettings,
        streams: StreamingStack,
        state: StateStack,
        analytics: AnalyticsStack,
        image_context: Path | None,
        **kwargs: object,
    ) -> None:
        self._max_azs = settings.capacity.max_azs
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        network = Network(
            self,
            "Network",
            max_azs=settings.capacity.max_azs,
            nat_gateways=settings.capacity.nat_gateways,
            log_retention_days=settings.consumer.log_retention_days,
        )
        suppress_cdk_vpc_handler(self)
        tables = state.state
        raw = analytics.lake.raw
        self.service = ConsumerService(
            self,
            "Consumer",
            vpc=network.vpc,
            settings=settings,
            image_directory=None if image_context is None else str(image_context),
            resources=ConsumerResources(
                # Physical names are fixed by the settings: no cross-stack reference needed.
                stream_names=tuple(s.name for s in settings.streams),
                lease_table_name=tables.lease_table.table_name,
                checkpoint_table_name=tables.checkpoint_table.table_name,
                dead_letter_queue_url=tables.dead_letter_queue.queue_url,
                raw_bucket_name=raw.bucket_name,
                processor_table_name=(
                    None if tables.processor_table is None else tables.processor_table.table_name
                ),
            ),
        )
        role = self.service.task_role
        stream: kinesis.IStream
        for stream in streams.kinesis.streams.values():
            stream.grant_read(role)
        if settings.consumer.retrieval == "fanout":
            self._grant_fanout(role, list(streams.kinesis.streams.values()), settings.consumer.application)
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(_TABLE_ACTIONS),
                resources=[tables.lease_table.table_arn, tables.checkpoint_table.table_arn],
            )
        )
        if tables.processor_table is not None and settings.consumer.processor_table is not None:
            # The processor's own table: exactly the item actions cdk.json lists for it.
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=[f"dynamodb:{a}" for a in settings.consumer.processor_table.actions],
                    resources=[tables.processor_table.table_arn],
                )
            )
        tables.key.grant_encrypt_decrypt(role)
        tables.dead_letter_queue.grant_send_messages(role)
        raw.grant_put(role, f"{settings.consumer.raw_prefix}/*")
        # The worker's start-up check of CONSUMER_RAW_BUCKET is a HeadBucket, which S3 authorizes as
        # s3:ListBucket on the bucket: without it every worker stops at start with "S3 denied access".
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[raw.bucket_arn])
        )
        objects = [f"<DataLakeRaw[0-9A-F]+\\.Arn>\\/{settings.consumer.raw_prefix}\\/\\*"]
        reason = (
            "The raw sink writes objects under the raw prefix only; the KMS action families are the "
            "data-key calls SSE-KMS needs for its streams, tables, queue and bucket."
        )
        if settings.consumer.retrieval == "fanout":
            objects.append(f"<Streams[A-Za-z0-9]+\\.Arn>\\/consumer\\/{settings.consumer.application}:\\*")
            reason += (
                " Enhanced fan-out: a stream consumer's ARN ends in its creation time, known only once it is "
                "registered, so the grant names this application's consumer and leaves the time open."
            )
        suppress_grant_wildcards(role, objects=objects, reason=reason)

    @property
    def availability_zones(self) -> list[str]:
        return [Fn.select(i, Fn.get_azs()) for i in range(self._max_azs)]

    @staticmethod
    def _grant_fanout(role: iam.IRole, streams: list[kinesis.Stream], consumer_name: str) -> None:
        """Enhanced fan-out: register/list the stream consumer on each stream, subscribe through it.

        ``SubscribeToShard`` and ``DescribeStreamConsumer`` act on the consumer's ARN
        (``<stream ARN>/consumer/<name>:<creation time>``), not on the stream's.
        """
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kinesis:RegisterStreamConsumer", "kinesis:ListStreamConsumers"],
                resources=[s.stream_arn for s in streams],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["kinesis:SubscribeToShard", "kinesis:DescribeStreamConsumer"],
                resources=[f"{s.stream_arn}/consumer/{consumer_name}:*" for s in streams],
            )
        )


class MonitoringStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: EnvironmentSettings,
        streams: StreamingStack,
        state: StateStack,
        analytics: AnalyticsStack,
        consumer: ConsumerServiceStack,
        **kwargs: object,
    ) -> None:
        super().__init__(scope, id, **kwargs)  # type: ignore[arg-type]
        self.monitoring = FleetMonitoring(
            self,
            "Monitoring",
            settings=settings,
            streams=dict(streams.kinesis.streams),
            dead_letter_queue=state.state.dead_letter_queue,
            service=consumer.service.service,
            compaction=analytics.compaction.state_machine,
        )


class FleetStage(Stage):
    """One environment: five stacks named ``kinesis-fleet-<env>-<unit>``, checked by cdk-nag AwsSolutions.

    The stacks deploy to ``account`` and ``region`` from ``cdk.json`` when set (a production environment must
    set both), otherwise wherever the deploying credentials point; synth needs no credentials either way (no
    lookups). A production environment's stacks have termination protection.
    """

    def __init__(
        self, scope: Construct, id: str, *, settings: EnvironmentSettings, sources: SourcePaths
    ) -> None:
        super().__init__(scope, id, env=Environment(account=settings.account, region=settings.region))
        prefix = f"kinesis-fleet-{settings.name}"
        protect = settings.production
        self.streaming = StreamingStack(
            self,
            "Streaming",
            settings=settings,
            stack_name=f"{prefix}-streaming",
            termination_protection=protect,
        )
        self.state = StateStack(
            self, "State", settings=settings, stack_name=f"{prefix}-state", termination_protection=protect
        )
        self.analytics = AnalyticsStack(
            self,
            "Analytics",
            settings=settings,
            spark_jobs=sources.spark_jobs,
            stack_name=f"{prefix}-analytics",
            termination_protection=protect,
        )
        # The image: your own (consumer.image), or built from a context holding the consumer and your project.
        project = processor_project(settings, sources.root)
        image_context = None if settings.consumer.image else assemble(sources.root, project)
        self.consumer = ConsumerServiceStack(
            self,
            "ConsumerService",
            settings=settings,
            streams=self.streaming,
            state=self.state,
            analytics=self.analytics,
            image_context=image_context,
            stack_name=f"{prefix}-consumer",
            termination_protection=protect,
        )
        self.monitoring = MonitoringStack(
            self,
            "Monitoring",
            settings=settings,
            streams=self.streaming,
            state=self.state,
            analytics=self.analytics,
            consumer=self.consumer,
            stack_name=f"{prefix}-monitoring",
            termination_protection=protect,
        )
        self.stacks: tuple[Stack, ...] = (
            self.streaming, self.state, self.analytics, self.consumer, self.monitoring
        )  # fmt: skip
        Tags.of(self).add("project", "kinesis-fleet")
        Tags.of(self).add("environment", settings.name)
        # Aspects do not cross Stage boundaries, so every stage adds the checks itself.
        Aspects.of(self).add(AwsSolutionsChecks(verbose=True))
