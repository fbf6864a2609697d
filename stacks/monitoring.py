"""Dashboard and alarms for the fleet, fed by the consumer's EMF metrics and the AWS service metrics."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from stacks.config import EnvironmentSettings
from stacks.metrics import consumer_metric

__all__ = ["FleetMonitoring"]

_MINUTE = Duration.minutes(1)
_FIVE_MINUTES = Duration.minutes(5)


class FleetMonitoring(Construct):
    """Alarms on consumer lag, iterator age, DLQ depth, lease losses, hand-off latency, tasks and compaction.

    Every alarm notifies ``topic`` (KMS-encrypted, SSL only); ``alarms`` maps a stable name to each alarm.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        settings: EnvironmentSettings,
        streams: dict[str, kinesis.IStream],
        dead_letter_queue: sqs.IQueue,
        service: ecs.BaseService,
        compaction: sfn.IStateMachine,
    ) -> None:
        super().__init__(scope, id)
        self._settings = settings
        key = kms.Key(self, "TopicKey", description="Alarm notifications", enable_key_rotation=True)
        key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        self.topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True)
        for email in settings.alarms.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        # An existing topic of the team's (chat, paging): every alarm notifies it too.
        self.team_topic = (
            None
            if settings.alarms.topic_arn is None
            else sns.Topic.from_topic_arn(self, "TeamTopic", settings.alarms.topic_arn)
        )
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._per_stream_alarms(streams)
        thresholds = settings.alarms
        self._alarm(
            "DeadLetterQueueDepth",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                statistic="Maximum", period=_MINUTE
            ),
            thresholds.dlq_depth,
            "Records the processor could not handle are waiting in the dead-letter queue",
        )
        running = cloudwatch.Metric(
            namespace="ECS/ContainerInsights",
            metric_name="RunningTaskCount",
            dimensions_map={"ClusterName": service.cluster.cluster_name, "ServiceName": service.service_name},
            statistic="Minimum",
            period=_MINUTE,
        )
        self._alarm(
            "TasksBelowMinimum",
            running,
            settings.scaling.min_tasks,
            "Fewer consumer tasks running than scaling.min_tasks",
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            missing=cloudwatch.TreatMissingData.BREACHING,
        )
        self._alarm(
            "CompactionFailed",
            compaction.metric_failed(statistic="Sum", period=_FIVE_MINUTES),
            1,
            "The compaction job failed after all its retries",
            periods=1,
        )
        self.dashboard = self._dashboard(streams, dead_letter_queue, service, running, compaction)

    def _per_stream_alarms(self, streams: dict[str, kinesis.IStream]) -> None:
        app, thresholds = self._settings.consumer.application, self._settings.alarms
        for name, stream in streams.items():
            lag = consumer_metric(app, name, "MillisBehindLatest", statistic="Maximum", period=_MINUTE)
            self._alarm(f"ConsumerLag-{name}", lag, thresholds.consumer_lag_ms, f"Consumer lag on {name}")
            age = self._read_age(name, stream)
            self._alarm(f"IteratorAge-{name}", age, thresholds.iterator_age_ms, f"Iterator age on {name}")
            lost = consumer_metric(app, name, "LeasesLost", statistic="Sum", period=_FIVE_MINUTES)
            self._alarm(
                f"LeasesLost-{name}",
                lost,
                thresholds.leases_lost_per_5_minutes,
                f"Workers lost leases on {name} (expired instead of handed off)",
                periods=1,
            )
            handoff = consumer_metric(app, name, "HandoffLatencyMs", statistic="p99", period=_FIVE_MINUTES)
            self._alarm(
                f"HandoffLatency-{name}", handoff, thresholds.handoff_latency_ms, f"Slow hand-offs on {name}"
            )
            stalled = consumer_metric(app, name, "HandoffsStalled", statistic="Sum", period=_FIVE_MINUTES)
            self._alarm(f"HandoffsStalled-{name}", stalled, 1, f"Hand-offs stalled on {name}", periods=1)
            halted = consumer_metric(app, name, "HaltedShards", statistic="Maximum", period=_MINUTE)
            self._alarm(
                f"HaltedShards-{name}",
                halted,
                1,
                f"A shard of {name} is halted on a record that fails every attempt (`status` shows where)",
                periods=1,
            )
            slow = consumer_metric(app, name, "ProcessorCallsSlow", statistic="Maximum", period=_MINUTE)
            self._alarm(
                f"ProcessorCallsSlow-{name}",
                slow,
                1,
                f"A process_records call on {name} has run longer than the lease duration for 2 minutes: its "
                "shard reads nothing until it returns (the worker logged processor_call_slow with its stack)",
                periods=2,
            )
            given_up = consumer_metric(app, name, "ShardsGivenUp", statistic="Sum", period=_FIVE_MINUTES)
            self._alarm(
                f"ShardsGivenUp-{name}",
                given_up,
                1,
                f"A worker gave a shard of {name} up after failing to reach Kinesis or DynamoDB for too long",
                periods=1,
            )
            raw = consumer_metric(app, name, "RawWriteFailures", statistic="Sum", period=_FIVE_MINUTES)
            self._alarm(
                f"RawWriteFailures-{name}",
                raw,
                1,
                f"The raw S3 sink's PUTs for {name} have failed for 15 minutes (raw_flush_failed in the log says "
                "why): nothing is lost, but its shards stop reading once CONSUMER_MAX_PENDING_RECORDS wait",
            )

    def _read_age(self, name: str, stream: kinesis.IStream) -> cloudwatch.IMetric:
        """How far behind the stream's tip its reads are, as Kinesis measures it: GetRecords'
        ``IteratorAgeMilliseconds`` when polling; with enhanced fan-out the fleet makes no GetRecords call, so
        the age of what Kinesis pushes to its stream consumer (named after the application)."""
        if self._settings.consumer.retrieval == "polling":
            return stream.metric_get_records_iterator_age_milliseconds(statistic="Maximum", period=_MINUTE)
        return cloudwatch.Metric(
            namespace="AWS/Kinesis",
            metric_name="SubscribeToShardEvent.MillisBehindLatest",
            dimensions_map={"StreamName": name, "ConsumerName": self._settings.consumer.application},
            statistic="Maximum",
            period=_MINUTE,
        )

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        description: str,
        *,
        periods: int = 3,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        ),
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            treat_missing_data=missing,
            alarm_description=description,
        )
        for topic in (self.topic, self.team_topic):
            if topic is not None:
                alarm.add_alarm_action(cw_actions.SnsAction(topic))
                alarm.add_ok_action(cw_actions.SnsAction(topic))
        self.alarms[name] = alarm

    def _dashboard(
        self,
        streams: dict[str, kinesis.IStream],
        dlq: sqs.IQueue,
        service: ecs.BaseService,
        running: cloudwatch.IMetric,
        compaction: sfn.IStateMachine,
    ) -> cloudwatch.Dashboard:
        app = self._settings.consumer.application

        def per_stream(metric: str, statistic: str) -> list[cloudwatch.IMetric]:
            return [
                consumer_metric(app, s, metric, statistic=statistic, period=_MINUTE).with_(
                    label=f"{s} {metric}"
                )
                for s in streams
            ]

        def graph(title: str, left: list[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
            return cloudwatch.GraphWidget(title=title, left=left, width=8, height=6)

        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.hours(3))
        dashboard.add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=list(self.alarms.values()), width=24, height=4
            )
        )
        dashboard.add_widgets(
            graph("Consumer lag (MillisBehindLatest, max)", per_stream("MillisBehindLatest", "Maximum")),
            graph(
                "Read age at Kinesis (iterator age, or fan-out MillisBehindLatest; max)",
                [self._read_age(name, s) for name, s in streams.items()],
            ),
            graph(
                "Records processed", per_stream("RecordsProcessed", "Sum") + per_stream("Checkpoints", "Sum")
            ),
        )
        dashboard.add_widgets(
            graph("Leases taken / lost", per_stream("LeasesTaken", "Sum") + per_stream("LeasesLost", "Sum")),
            graph(
                "Hand-off latency (p50, p99) and stalls",
                per_stream("HandoffLatencyMs", "p50")
                + per_stream("HandoffLatencyMs", "p99")
                + per_stream("HandoffsStalled", "Sum"),
            ),
            graph(
                "Failures and dead letters",
                per_stream("ProcessorFailures", "Sum")
                + per_stream("DeadLettered", "Sum")
                + per_stream("RawWriteFailures", "Sum")
                + [dlq.metric_approximate_number_of_messages_visible(statistic="Maximum", period=_MINUTE)],
            ),
        )
        dashboard.add_widgets(
            graph("Running tasks", [running]),
            graph(
                "Task CPU / memory (%)",
                [service.metric_cpu_utilization(), service.metric_memory_utilization()],
            ),
            graph("Compaction runs", [compaction.metric_succeeded(), compaction.metric_failed()]),
        )
        return dashboard
