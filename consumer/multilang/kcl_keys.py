"""Every key a KCL MultiLangDaemon properties file may hold, and its fate here: mapped to a setting of this
consumer, ignored (with the reason, told at start) or refused (honouring it would change behaviour).

The keys are those of amazon-kclpy 3.2.0's ``samples/sample.properties`` and of the KCL 2.x/3.x
configuration the MultiLangDaemon reads; :mod:`consumer.multilang.properties` applies them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BOOLEAN_KEYS", "DEFAULTS_ACCEPTED", "KEYS", "Fate", "kcl_boolean"]


@dataclass(frozen=True)
class Fate:
    """What happens to one KCL key: ``mapped`` (to ``target``), ``ignored`` or ``refused`` (with ``why``)."""

    kind: str  # "mapped", "ignored", "refused-unless-default"
    target: str
    why: str = ""


_IGNORED_METRICS = (
    "KCL 3.x worker-utilisation balancing: this consumer balances leases by count (docs/protocol.md)"
)
_IGNORED_COORD = "KCL 3.x coordinator state table: this consumer keeps leadership in its lease table"

#: Every key this daemon knows: the sample file's, plus ``timeoutInSeconds`` of the KCL's MultiLang config.
KEYS: dict[str, Fate] = {
    "executableName": Fate("mapped", "the child command, started once per owned shard"),
    "streamArn": Fate("mapped", "the stream (its name; the region must match regionName)"),
    "streamName": Fate("mapped", "the stream (streamArn takes precedence)"),
    "applicationName": Fate(
        "mapped", "WorkerConfig.application; default table names <name>-fleet-leases/-checkpoints"
    ),
    "AwsCredentialsProvider": Fate("refused-unless-default", "", "credentials come from the AWS_* chain"),
    "AwsCredentialsProviderDynamoDB": Fate(
        "refused-unless-default", "", "credentials come from the AWS_* chain"
    ),
    "AwsCredentialsProviderCloudWatch": Fate(
        "refused-unless-default", "", "credentials come from the AWS_* chain"
    ),
    "processingLanguage": Fate("ignored", "", "only appended to the KCL's user agent"),
    "initialPositionInStream": Fate("mapped", "retrieval.initial_position"),
    "initialPositionInStreamExtended": Fate(
        "mapped", "retrieval.initial_timestamp (epoch seconds; AT_TIMESTAMP)"
    ),
    "regionName": Fate("mapped", "the AWS region of every client"),
    "failoverTimeMillis": Fate("mapped", "lease.lease_duration"),
    "workerId": Fate("mapped", "WorkerConfig.worker_id"),
    "shardSyncIntervalMillis": Fate("mapped", "lease.discovery_interval"),
    "maxRecords": Fate("mapped", "retrieval.max_records"),
    "idleTimeBetweenReadsInMillis": Fate("mapped", "retrieval.idle_time_between_reads"),
    "callProcessRecordsEvenForEmptyRecordList": Fate(
        "refused-unless-default", "", "this consumer delivers only non-empty batches (false is the default)"
    ),
    "parentShardPollIntervalMillis": Fate("ignored", "", "parents are tracked by the leader's lease scan"),
    "cleanupLeasesUponShardCompletion": Fate(
        "ignored", "", "ended leases are kept until their shard is trimmed, then deleted by discovery"
    ),
    "taskBackoffTimeMillis": Fate(
        "mapped", "the child's restart backoff (doubling per failure, at most 10 s)"
    ),
    "metricsBufferTimeMillis": Fate("mapped", "the metrics flush interval (CloudWatch EMF on stdout)"),
    "metricsMaxQueueSize": Fate("ignored", "", "metrics are aggregated per interval, not queued"),
    "validateSequenceNumberBeforeCheckpointing": Fate(
        "ignored",
        "",
        "checkpoints are checked against the records delivered to the child, without a Kinesis call",
    ),
    "maxActiveThreads": Fate("ignored", "", "one thread per owned shard"),
    "clientVersionConfig": Fate(
        "ignored", "", "the lease table is this consumer's (import a KCL table: import-kcl)"
    ),
    "coordinatorStateTableName": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStateBillingMode": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStateReadCapacity": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStateWriteCapacity": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStatePointInTimeRecoveryEnabled": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStateDeletionProtectionEnabled": Fate("ignored", "", _IGNORED_COORD),
    "coordinatorStateTags": Fate("ignored", "", _IGNORED_COORD),
    "gracefulLeaseHandoffTimeoutMillis": Fate(
        "mapped",
        "how long the child may take to answer shutdownRequested (at most the shutdown deadline less the "
        "final checkpoint timeout)",
    ),
    "isGracefulLeaseHandoffEnabled": Fate(
        "refused-unless-default", "", "hand-offs are always graceful here (true is the default)"
    ),
    "workerMetricsTableName": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsBillingMode": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsReadCapacity": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsWriteCapacity": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsPointInTimeRecoveryEnabled": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsDeletionProtectionEnabled": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsTags": Fate("ignored", "", _IGNORED_METRICS),
    "inMemoryWorkerMetricsCaptureFrequencyMillis": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsReporterFreqInMillis": Fate("ignored", "", _IGNORED_METRICS),
    "noOfPersistedMetricsPerWorkerMetrics": Fate("ignored", "", _IGNORED_METRICS),
    "disableWorkerMetrics": Fate("ignored", "", _IGNORED_METRICS),
    "maxThroughputPerHostKBps": Fate("refused", "", "this consumer does not throttle processing per host"),
    "dampeningPercentage": Fate("ignored", "", _IGNORED_METRICS),
    "reBalanceThresholdPercentage": Fate("ignored", "", _IGNORED_METRICS),
    "allowThroughputOvershoot": Fate("ignored", "", _IGNORED_METRICS),
    "varianceBalancingFrequency": Fate("ignored", "", _IGNORED_METRICS),
    "workerMetricsEMAAlpha": Fate("ignored", "", _IGNORED_METRICS),
    "staleWorkerMetricsEntryCleanupDuration": Fate("ignored", "", _IGNORED_METRICS),
    "leaseAssignmentIntervalMillis": Fate("mapped", "lease.scan_interval (the leader plans after each scan)"),
    "timeoutInSeconds": Fate("mapped", "how long the child may take to answer any message (default 60)"),
    # The other keys the KCL's MultiLangDaemonConfiguration reads (KCL 2.x/3.x), beyond the sample file's.
    "workerIdentifier": Fate("mapped", "WorkerConfig.worker_id (as workerId)"),
    "kinesisEndpoint": Fate("mapped", "the Kinesis client's endpoint (create_worker endpoints['kinesis'])"),
    "dynamoDBEndpoint": Fate(
        "mapped", "the DynamoDB client's endpoint (create_worker endpoints['dynamodb'])"
    ),
    "dynamoDBRegionName": Fate(
        "refused-unless-default", "", "every client uses regionName (accepted when it is the same region)"
    ),
    "cloudWatchRegionName": Fate("ignored", "", "metrics are CloudWatch EMF on stdout, not PutMetricData"),
    "maxLeasesForWorker": Fate("mapped", "lease.max_leases_per_worker"),
    "retrievalMode": Fate(
        "mapped",
        "retrieval.mode (POLLING: polling, FANOUT: fanout, its stream consumer named applicationName as the "
        "KCL's unless CONSUMER_FANOUT_NAME is set; DEFAULT: this consumer's default, polling)",
    ),
    "tableName": Fate(
        "ignored",
        "",
        "the KCL's own lease table, never used here: import its checkpoints with import-kcl --kcl-table <it>",
    ),
    "maxLeasesToStealAtOneTime": Fate("ignored", "", "the leader's plan moves leases (docs/protocol.md)"),
    "ignoreUnexpectedChildShards": Fate("ignored", "", "child shards are found by discovery"),
    "maxLeaseRenewalThreads": Fate("ignored", "", "one heartbeat item per worker keeps all its leases"),
    "initialLeaseTableReadCapacity": Fate(
        "ignored", "", "the tables are made by create-tables or the state stack"
    ),
    "initialLeaseTableWriteCapacity": Fate(
        "ignored", "", "the tables are made by create-tables or the state stack"
    ),
    "listShardsBackoffTimeInMillis": Fate(
        "ignored", "", "ListShards is retried with this consumer's backoff"
    ),
    "maxListShardsRetryAttempts": Fate("ignored", "", "ListShards is retried with this consumer's backoff"),
    "shardPrioritization": Fate("ignored", "", "parents are always read before their children"),
    "skipShardSyncAtWorkerInitializationIfLeasesExist": Fate("ignored", "", "discovery runs on the leader"),
    "schedulerInitializationBackoffTimeMillis": Fate(
        "ignored", "", "start-up checks fail at once, in one line"
    ),
    "metricsLevel": Fate("ignored", "", "metrics are CloudWatch EMF on stdout at one level"),
    "metricsEnabledDimensions": Fate("ignored", "", "metrics are CloudWatch EMF on stdout at one level"),
    "logWarningForTaskAfterMillis": Fate("ignored", "", "a slow child is bounded by timeoutInSeconds"),
    "retryGetRecordsInSeconds": Fate("ignored", "", "GetRecords is retried with this consumer's backoff"),
    "maxGetRecordsThreadPool": Fate("ignored", "", "one reader per owned shard"),
    "shutdownGraceMillis": Fate(
        "ignored",
        "",
        "a stop is bounded by CONSUMER_SHUTDOWN_DEADLINE_SECONDS and gracefulLeaseHandoffTimeoutMillis",
    ),
    # KCL 2.5+/3.x LeaseManagementConfig keys the MultiLangDaemonConfiguration reads.
    "enablePriorityLeaseAssignment": Fate(
        "ignored",
        "",
        "the leader assigns every free or expired lease at its next plan, within maxLeasesForWorker "
        "(docs/protocol.md)",
    ),
    "leaseTableDeletionProtectionEnabled": Fate(
        "ignored",
        "",
        "the tables are made by create-tables or the state stack (its deletion_protection setting in cdk.json)",
    ),
    "leaseTablePitrEnabled": Fate(
        "ignored",
        "",
        "the tables are made by create-tables or the state stack (which turns point-in-time recovery on)",
    ),
}

_DEFAULT_CHAINS = (
    "DefaultCredentialsProvider",
    "DefaultAWSCredentialsProviderChain",
    "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider",
    "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
)
#: The keys the KCL reads as booleans (through commons-beanutils: case-insensitive, yes/no, on/off, 1/0 too)
#: whose value this daemon compares.
BOOLEAN_KEYS = frozenset({"callProcessRecordsEvenForEmptyRecordList", "isGracefulLeaseHandoffEnabled"})

_TRUE = frozenset({"true", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "no", "n", "off", "0"})


def kcl_boolean(value: str) -> str | None:
    """``"true"`` or ``"false"`` for a value the KCL reads as that boolean (``True``, ``FALSE``, ``yes``,
    ``off``, ``1``, ...: commons-beanutils' ``BooleanConverter``), None for one it refuses."""
    text = value.strip().lower()
    return "true" if text in _TRUE else "false" if text in _FALSE else None


#: The values a refused-unless-default key may have (anything else is refused); a key of ``BOOLEAN_KEYS`` is
#: compared after ``kcl_boolean``.
DEFAULTS_ACCEPTED: dict[str, tuple[str, ...]] = {
    "AwsCredentialsProvider": _DEFAULT_CHAINS,
    "AwsCredentialsProviderDynamoDB": _DEFAULT_CHAINS,
    "AwsCredentialsProviderCloudWatch": _DEFAULT_CHAINS,
    "callProcessRecordsEvenForEmptyRecordList": ("false",),
    "isGracefulLeaseHandoffEnabled": ("true",),
}
