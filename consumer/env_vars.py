"""The environment variables a worker reads: one table, used for parsing, error messages and ``run --help``.

Each row names the variable, the config field it sets (``section.field`` of ``WorkerConfig`` or of a
processor's settings, such as ``raw_sink.bucket``, or a process setting such as ``metrics_interval`` that is
not part of the config dataclasses), a default text
when the default is derived rather than a dataclass default, and one line of help.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ENV_VARS", "PROCESSOR_ENV_VARS", "EnvVar", "variable_for"]


@dataclass(frozen=True)
class EnvVar:
    """One variable: its name, the config field it sets, its one line of help, and its default text."""

    name: str
    field: str  # "lease.lease_duration"; "" for a variable that is not a config field
    help: str
    default: str | None = None  # None: the dataclass field's default; "" : no default (optional)
    required: bool = False


ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("CONSUMER_APPLICATION", "application", "application name (metrics dimension)", required=True),
    EnvVar(
        "CONSUMER_STREAMS",
        "streams",
        "`name` or `name=package.module:Class`, comma-separated",
        required=True,
    ),
    EnvVar("CONSUMER_PROCESSOR", "processor", "processor for streams without their own", default=""),
    EnvVar("CONSUMER_LEASE_TABLE", "lease_table", "the lease table (hash key lease_key, S)", required=True),
    EnvVar("CONSUMER_CHECKPOINT_TABLE", "checkpoint_table", "the checkpoint table", required=True),
    EnvVar("CONSUMER_WORKER_ID", "worker_id", "unique per process, never reused", default="host-pid-random"),
    EnvVar(
        "CONSUMER_LEASE_DURATION_SECONDS", "lease.lease_duration", "how long a silent worker keeps leases"
    ),
    EnvVar(
        "CONSUMER_SAFETY_MARGIN_SECONDS",
        "lease.safety_margin",
        "the owner stops delivering this much before its lease could be taken",
        default="lease duration / 5",
    ),
    EnvVar(
        "CONSUMER_SCAN_INTERVAL_SECONDS",
        "lease.scan_interval",
        "the leader's lease-table scan (liveness, planning)",
    ),
    EnvVar(
        "CONSUMER_INBOX_POLL_SECONDS",
        "lease.inbox_poll_interval",
        "own worker item poll while a hand-off is under way",
    ),
    EnvVar(
        "CONSUMER_IDLE_POLL_SECONDS", "lease.idle_poll_interval", "own worker item poll when all is quiet"
    ),
    EnvVar(
        "CONSUMER_LEADER_CHECK_SECONDS",
        "lease.leader_check_interval",
        "how often followers check the leader's heartbeat",
    ),
    EnvVar(
        "CONSUMER_MAX_MOVES_PER_SECOND",
        "lease.max_moves_per_second",
        "the leader's lease moves per second (an assignment 1, a request 2): the table's throughput at fleet start",
    ),
    EnvVar("CONSUMER_DISCOVERY_INTERVAL_SECONDS", "lease.discovery_interval", "ListShards (resharding)"),
    EnvVar(
        "CONSUMER_GIVE_UP_AFTER_SECONDS",
        "lease.give_up_after",
        "a shard failing transiently this long is handed to another live worker (or released); > 0",
        default="lease duration",
    ),
    EnvVar(
        "CONSUMER_FORGET_WORKERS_AFTER_SECONDS",
        "lease.forget_workers_after",
        "silent worker items are deleted after this (at least 2 x lease duration)",
        default="3 x lease duration",
    ),
    EnvVar("CONSUMER_RETRIEVAL", "retrieval.mode", "polling or fanout (enhanced fan-out)"),
    EnvVar("CONSUMER_FANOUT_NAME", "retrieval.fanout_consumer_name", "fan-out consumer name", default=""),
    EnvVar("CONSUMER_MAX_RECORDS", "retrieval.max_records", "GetRecords limit (1..10000)"),
    EnvVar(
        "CONSUMER_IDLE_TIME_SECONDS",
        "retrieval.idle_time_between_reads",
        "time from the start of one GetRecords call to the next on a shard that is caught up",
    ),
    EnvVar(
        "CONSUMER_READS_PER_SECOND",
        "retrieval.reads_per_second",
        "GetRecords calls per second per shard at most, behind or not (AWS allows 5, shared by every reader)",
    ),
    EnvVar(
        "CONSUMER_READ_BYTES_PER_SECOND",
        "retrieval.read_bytes_per_second",
        "bytes read per second per shard at most while behind (AWS allows 2 MiB, shared by every reader)",
    ),
    EnvVar(
        "CONSUMER_PREFETCH_BATCHES",
        "retrieval.prefetch_batches",
        "batches fetched ahead while the processor works (0..16; 0: none)",
    ),
    EnvVar(
        "CONSUMER_FETCH_THREADS",
        "threads.fetch_threads",
        "threads that run every shard's GetRecords (the Kinesis connection pool follows); fan-out: one per shard",
    ),
    EnvVar(
        "CONSUMER_PROCESSOR_THREADS",
        "threads.processor_threads",
        "threads that run processor calls and checkpoints, one per shard at a time (DynamoDB pool follows)",
    ),
    EnvVar(
        "CONSUMER_INITIAL_POSITION",
        "retrieval.initial_position",
        "TRIM_HORIZON, LATEST or AT_TIMESTAMP; only for shards without a checkpoint (LATEST: as of when the "
        "shard's lease was created, for every owner: protocol.md)",
    ),
    EnvVar(
        "CONSUMER_INITIAL_TIMESTAMP",
        "retrieval.initial_timestamp",
        "ISO-8601 with a time zone, e.g. 2024-05-01T12:00:00Z (with AT_TIMESTAMP)",
        default="",
    ),
    EnvVar("CONSUMER_CHECKPOINT_MODE", "checkpoint.mode", "auto or manual (per-record done())"),
    EnvVar("CONSUMER_CHECKPOINT_FLUSH_SECONDS", "checkpoint.flush_interval", "manual mode flush interval"),
    EnvVar(
        "CONSUMER_MAX_PENDING_RECORDS",
        "checkpoint.max_pending_records",
        "manual mode: delivered, not yet done records per shard before fetching pauses",
    ),
    EnvVar(
        "CONSUMER_CHECKPOINT_INTERVAL_SECONDS",
        "checkpoint.auto_interval",
        "auto mode: at most one checkpoint write per interval (0: one per batch); a stop or hand-off writes at once",
    ),
    EnvVar("CONSUMER_MAX_ATTEMPTS", "processing.max_attempts", "processor attempts per batch and record"),
    EnvVar("CONSUMER_ON_FAILURE", "processing.on_failure", "halt or dlq (needs CONSUMER_DLQ_URL)"),
    EnvVar("CONSUMER_DLQ_URL", "processing.dlq_url", "SQS dead-letter queue URL", default=""),
    EnvVar(
        "CONSUMER_SHUTDOWN_DEADLINE_SECONDS",
        "shutdown.deadline",
        "graceful shutdown; a processor call still running adds up to 2x the final checkpoint timeout",
    ),
    EnvVar(
        "CONSUMER_FINAL_CHECKPOINT_TIMEOUT_SECONDS",
        "shutdown.final_checkpoint_timeout",
        "wait for in-flight records at shutdown (at most the deadline)",
        default="min(5, shutdown deadline)",
    ),
    EnvVar(
        "CONSUMER_HEALTH_FILE",
        "health.file",
        "touched on every coordinator step; `health` checks its age (the image sets it)",
        default="",
    ),
    EnvVar(
        "CONSUMER_HEALTH_MAX_AGE_SECONDS",
        "health.max_age",
        "`health` fails when the file is older than this",
    ),
    EnvVar("CONSUMER_METRICS_INTERVAL_SECONDS", "metrics_interval", "EMF metrics flush", default="10"),
    EnvVar(
        "CONSUMER_METRICS_DIMENSIONS",
        "metrics_dimensions",
        "`shard`: each metric per stream and per shard; `stream`: per stream only (custom metrics that do not "
        "grow with the shards)",
        default="shard",
    ),
    EnvVar(
        "CONSUMER_LOG_LEVEL",
        "log_level",
        "DEBUG, INFO, WARNING, ERROR or CRITICAL (WARN and FATAL are aliases)",
        default="INFO",
    ),
)

#: Settings of the shipped processors: the raw sink's (fields of ``RawSinkConfig``, read with the worker's
#: configuration and handed to the sink), and those the other processors read when the worker constructs one.
PROCESSOR_ENV_VARS: tuple[EnvVar, ...] = (
    EnvVar("CONSUMER_RAW_BUCKET", "raw_sink.bucket", "raw S3 sink: target bucket", required=True),
    EnvVar(
        "CONSUMER_RAW_PREFIX",
        "raw_sink.prefix",
        "raw S3 sink: key prefix: letters, digits, `/` and `!_.*'()=-`, no empty, `.` or `..` folder, "
        "at most 512 bytes",
    ),
    EnvVar(
        "CONSUMER_RAW_MAX_BYTES",
        "raw_sink.max_bytes",
        "raw S3 sink: flush a buffer at this size, at most `1073741824` (was RAW_MAX_BYTES, still read)",
    ),
    EnvVar(
        "CONSUMER_RAW_MAX_RECORDS",
        "raw_sink.max_records",
        "raw S3 sink: flush a buffer at this many records (was RAW_MAX_RECORDS, still read)",
    ),
    EnvVar(
        "CONSUMER_RAW_MAX_AGE_SECONDS",
        "raw_sink.max_age",
        "raw S3 sink: flush a buffer this old (was RAW_MAX_AGE_SECONDS, still read)",
    ),
    EnvVar(
        "CONSUMER_RAW_CONNECT_TIMEOUT_SECONDS",
        "raw_sink.connect_timeout",
        "raw S3 sink: a PUT's connect timeout, at most `60` (one attempt per PUT; a failed one is tried again"
        " after the sink's backoff)",
    ),
    EnvVar(
        "CONSUMER_RAW_READ_TIMEOUT_SECONDS",
        "raw_sink.read_timeout",
        "raw S3 sink: how long a PUT waits for S3 to take more of the body or to answer, at most `60`; the PUT"
        " holds its shard for up to this long",
    ),
    EnvVar("COPIER_TARGET_STREAM", "", "stream copier: the stream to copy into", required=True),
    EnvVar("WEBHOOK_URL", "", "async webhook: the endpoint each batch is POSTed to", required=True),
    EnvVar("WEBHOOK_TIMEOUT_SECONDS", "", "async webhook: connect, send and answer timeout", default="10"),
)

_BY_FIELD = {v.field: v.name for v in (*ENV_VARS, *PROCESSOR_ENV_VARS) if v.field}


def variable_for(field: str) -> str | None:
    """The variable that sets config field ``field`` (``lease.lease_duration``), if there is one."""
    return _BY_FIELD.get(field)
