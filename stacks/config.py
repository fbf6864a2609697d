"""Per-environment settings: read from the ``environments`` context in ``cdk.json``, validated, frozen.

Nothing here imports aws_cdk, so the rules can be tested (and run by ``app.py``) without a synth. Every error
names the setting it rejects, as a dotted path such as ``environments.prod.scaling.max_tasks``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

__all__ = [
    "AlarmSettings",
    "AnalyticsSettings",
    "CapacitySettings",
    "ConfigError",
    "ConsumerSettings",
    "EnvironmentSettings",
    "InstanceType",
    "ProcessorTableSettings",
    "ScalingSettings",
    "StreamSettings",
    "load_environments",
    "select_environments",
]

# ECS refuses a container stopTimeout above 120 s.
MAX_STOP_TIMEOUT_SECONDS = 120
# ECS deployments start up to this share of the desired count before old tasks stop (maximumPercent).
DEPLOYMENT_MAX_PERCENT = 200


@dataclass(frozen=True)
class InstanceType:
    """What bounds how many consumer tasks fit on one instance: vCPUs, memory and network interfaces."""

    vcpus: int
    memory_mib: int
    max_enis: int

    def tasks_per_instance(self, cpu: int, memory_mib: int) -> int:
        """awsvpc tasks of this size one instance holds: every task takes its own ENI (the instance keeps one),
        and the ECS agent and OS keep about a tenth of the memory."""
        by_eni = self.max_enis - 1
        by_cpu = self.vcpus * 1024 // cpu
        by_memory = int(self.memory_mib * 0.9) // memory_mib
        return min(by_eni, by_cpu, by_memory)


# The EC2 instance types the capacity settings accept (EC2 quotas per type; ENI trunking is not assumed, as
# it is an account setting outside the stacks). Add a type here with its numbers to use it.
INSTANCE_TYPES: dict[str, InstanceType] = {
    "t3.medium": InstanceType(2, 4096, 3),
    "t3.large": InstanceType(2, 8192, 3),
    "c6i.large": InstanceType(2, 4096, 3),
    "c6i.xlarge": InstanceType(4, 8192, 4),
    "m6i.large": InstanceType(2, 8192, 3),
    "m6i.xlarge": InstanceType(4, 16384, 4),
    "m6i.2xlarge": InstanceType(8, 32768, 4),
    "m6i.4xlarge": InstanceType(16, 65536, 8),
    "m7i.large": InstanceType(2, 8192, 3),
    "m7i.xlarge": InstanceType(4, 16384, 4),
}
_PROCESSOR = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# The EMR Serverless application is named "<application>-analytics", and EMR allows 64 characters.
_APPLICATION = re.compile(r"^[A-Za-z0-9_-]{1,54}$")
# A Stage id and a part of every stack name (kinesis-fleet-<env>-<unit>), which CloudFormation limits to these.
_ENVIRONMENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,63}$")
# EventBridge Scheduler: cron(minutes hours day-of-month month day-of-week year), or rate(value unit).
_CRON = re.compile(r"^cron\(\S+( \S+){5}\)$")
_RATE = re.compile(r"^rate\((?P<value>[1-9]\d*) (?P<unit>minutes?|hours?|days?)\)$")
# The worker scans the lease table and checks its leader's heartbeat every second (CONSUMER_SCAN_INTERVAL_SECONDS,
# CONSUMER_LEADER_CHECK_SECONDS), and refuses a lease duration that is not longer.
_WORKER_POLL_SECONDS = 1.0
# A stopping worker's longest stay after SIGTERM, past its shutdown deadline: it waits up to its final checkpoint
# timeout (min(5, deadline), the task sets no other) for shard loops still in a processor call, as long again for
# the asyncio processors' loop to close, then the interpreter exits.
_EXIT_SECONDS = 2.0
_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_ENV_VAR = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
# Variables a processor's table name must not replace: the consumer's and AWS's (the task definition sets them),
# ECS's (the agent sets them), the interpreter's (PYTHONHOME, PYTHONPATH ... change what the worker runs; the
# image sets some) and the process's own.
_RESERVED_PREFIXES = ("CONSUMER_", "AWS_", "ECS_", "PYTHON", "LD_")
_RESERVED_VARIABLES = frozenset({"PATH", "HOME", "HOSTNAME", "USER", "LANG", "TZ", "TMPDIR"})
# A processor's own settings: plain values (at most what ECS takes), or secrets by ARN (ECS's valueFrom: a
# Secrets Manager secret's complete ARN, optionally :json-key:version-stage:version-id, or an SSM parameter's).
_PLAIN_VALUE = re.compile(r"^.{0,4096}$", re.DOTALL)
_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}"
    r"(:[^:]*:[^:]*:[^:]*)?|ssm:[a-z0-9-]+:\d{12}:parameter/[A-Za-z0-9_.\-/]+)$"
)
_SECRET_HINT = (
    "the ARN of a Secrets Manager secret (complete, ending in its 6-character suffix) or of an SSM parameter "
    "(arn:aws:ssm:<region>:<account>:parameter/<name>)"
)
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY|PRIVATE_KEY|CREDENTIAL")
_ATTRIBUTE = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")
# ECR or any other registry: [host/]repository[:tag][@sha256:digest]; a tag or a digest is required.
_IMAGE_URI = re.compile(r"^[a-z0-9.-]+(:\d+)?/[a-z0-9._/-]+(:[A-Za-z0-9_.-]{1,128}|@sha256:[0-9a-f]{64})$")
# Item-level DynamoDB actions a processor may be granted on its table (no table management, no streams).
PROCESSOR_TABLE_ACTIONS = (
    "GetItem",
    "BatchGetItem",
    "Query",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "BatchWriteItem",
    "ConditionCheckItem",
)
_FARGATE_CPU = (256, 512, 1024, 2048, 4096)
# The memory (MiB) Fargate accepts with each CPU size (AWS's task-size table: 0.25 vCPU takes 0.5, 1 or 2 GB;
# the others whole GBs from twice the vCPUs to eight times them, up to 30 GB at 4 vCPUs).
_FARGATE_MEMORY = {
    256: (512, 1024, 2048),
    512: tuple(range(1024, 4097, 1024)),
    1024: tuple(range(2048, 8193, 1024)),
    2048: tuple(range(4096, 16385, 1024)),
    4096: tuple(range(8192, 30721, 1024)),
}


class ConfigError(ValueError):
    """A per-environment setting is missing, unknown or out of range; ``setting`` is its dotted path."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting


@dataclass(frozen=True)
class StreamSettings:
    """One Kinesis data stream. ``shard_count`` is fixed when provisioned, the expected count when on-demand."""

    name: str
    capacity_mode: Literal["ON_DEMAND", "PROVISIONED"]
    shard_count: int
    retention_hours: int


@dataclass(frozen=True)
class ProcessorTableSettings:
    """A DynamoDB table of the processor's own: its name reaches the task as ``variable``, and the task role may
    call ``actions`` (item-level only) on it and nothing else."""

    variable: str
    partition_key: str
    actions: tuple[str, ...]


@dataclass(frozen=True)
class ConsumerSettings:
    """What the consumer task runs with; most values become ``CONSUMER_*`` environment variables.

    The processor's code: ``processor_project`` (a Python project folder, relative to ``cdk.json``, installed
    into the image on top of the consumer), or ``image`` (a URI the team builds itself), or neither (one of
    the processors shipped in the ``consumer`` package).
    """

    application: str
    processor: str
    processor_project: str | None
    image: str | None
    processor_table: ProcessorTableSettings | None
    on_failure: Literal["dlq", "halt"]
    lease_duration_seconds: float
    shutdown_deadline_seconds: float
    stop_timeout_seconds: int
    raw_prefix: str
    retrieval: Literal["polling", "fanout"]
    cpu: int
    memory_mib: int
    log_retention_days: int
    #: The processor's own settings, as (variable, value): plain values in the task definition's environment.
    processor_environment: tuple[tuple[str, str], ...] = ()
    #: The processor's secrets, as (variable, ARN of a Secrets Manager secret or an SSM parameter): ECS reads
    #: each at task start (the execution role may read exactly these); the template holds only the ARN.
    processor_secrets: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ScalingSettings:
    """Bounds and lag target of the ECS service's step scaling."""

    min_tasks: int
    max_tasks: int
    standby_tasks: int
    lag_target_ms: int
    scale_out_cooldown_seconds: int
    scale_in_cooldown_seconds: int


@dataclass(frozen=True)
class CapacitySettings:
    """Where tasks run: an EC2 Auto Scaling group capacity provider, or Fargate.

    ``target_capacity_percent`` is ECS managed scaling's target: below 100 it keeps spare instances, so a
    deployment or an instance drain finds room for the new tasks without waiting for an instance to launch.
    """

    launch_type: Literal["EC2", "FARGATE"]
    instance_type: str
    min_instances: int
    max_instances: int
    target_capacity_percent: int
    nat_gateways: int
    max_azs: int


@dataclass(frozen=True)
class AnalyticsSettings:
    """EMR Serverless capacity, the compaction schedule and S3 lifecycle."""

    emr_release_label: str
    max_vcpu: int
    max_memory_gb: int
    compaction_schedule: str
    compaction_enabled: bool
    compaction_retries: int
    #: Each scheduled run covers the last this many full UTC hours, rewriting only the stale ones.
    compaction_lookback_hours: int
    job_timeout_minutes: int
    raw_expiration_days: int
    curated_infrequent_access_days: int


@dataclass(frozen=True)
class AlarmSettings:
    """Alarm thresholds; ``emails`` receive the alarm topic's notifications."""

    consumer_lag_ms: int
    iterator_age_ms: int
    dlq_depth: int
    leases_lost_per_5_minutes: int
    handoff_latency_ms: int
    emails: tuple[str, ...]
    topic_arn: str | None

    @property
    def has_target(self) -> bool:
        """Whether an alarm reaches anybody: an e-mail subscription or an existing SNS topic."""
        return bool(self.emails) or self.topic_arn is not None


@dataclass(frozen=True)
class EnvironmentSettings:
    """Everything that differs between dev, staging and prod.

    ``account`` and ``region`` pin the stacks to one AWS environment (``None``: the deploying credentials').
    A ``production`` environment must name both and an alarm target; its stacks get termination protection.
    """

    name: str
    account: str | None
    region: str | None
    production: bool
    deletion_protection: bool
    streams: tuple[StreamSettings, ...]
    consumer: ConsumerSettings
    scaling: ScalingSettings
    capacity: CapacitySettings
    analytics: AnalyticsSettings
    alarms: AlarmSettings

    @property
    def total_shards(self) -> int:
        """Shards across all streams: the most leases the fleet can spread over workers."""
        return sum(s.shard_count for s in self.streams)

    @property
    def max_useful_tasks(self) -> int:
        """Tasks beyond this hold no lease: one per shard plus the configured standbys."""
        return self.total_shards + self.scaling.standby_tasks


class _Section:
    """Typed reads from one JSON object, with errors that name the setting; rejects unknown keys."""

    def __init__(self, path: str, raw: object) -> None:
        if not isinstance(raw, Mapping):
            raise ConfigError(path, f"must be an object, got {type(raw).__name__}")
        self.path = path
        self._raw = cast(Mapping[str, Any], raw)
        self._read: set[str] = set()

    def _get(self, key: str) -> Any:
        if key not in self._raw:
            raise ConfigError(f"{self.path}.{key}", "is required")
        self._read.add(key)
        return self._raw[key]

    def section(self, key: str) -> _Section:
        return _Section(f"{self.path}.{key}", self._get(key))

    def optional_text(self, key: str, pattern: re.Pattern[str], hint: str) -> str | None:
        """A string matching ``pattern``, or null or absent (CDK drops null context values); ``hint`` says what a
        good value looks like."""
        self._read.add(key)
        value = self._raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.match(value):
            raise ConfigError(f"{self.path}.{key}", f"must be {hint} or null, got {value!r}")
        return value

    def text(self, key: str, pattern: re.Pattern[str] | None = None) -> str:
        value = self._get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{self.path}.{key}", f"must be a non-empty string, got {value!r}")
        if pattern is not None and not pattern.match(value):
            raise ConfigError(f"{self.path}.{key}", f"{value!r} does not match {pattern.pattern}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self._get(key)
        if value not in allowed:
            raise ConfigError(f"{self.path}.{key}", f"must be one of {', '.join(allowed)}; got {value!r}")
        return cast(str, value)

    def flag(self, key: str) -> bool:
        value = self._get(key)
        if not isinstance(value, bool):
            raise ConfigError(f"{self.path}.{key}", f"must be true or false, got {value!r}")
        return value

    def integer(self, key: str, minimum: int, maximum: int | None = None) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{self.path}.{key}", f"must be an integer, got {value!r}")
        return cast(int, self._in_range(key, value, minimum, maximum))

    def number(self, key: str, minimum: float, maximum: float | None = None) -> float:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.path}.{key}", f"must be a number, got {value!r}")
        return float(self._in_range(key, value, minimum, maximum))

    def _in_range(self, key: str, value: float, minimum: float, maximum: float | None) -> float:
        if value < minimum:
            raise ConfigError(f"{self.path}.{key}", f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(f"{self.path}.{key}", f"must be <= {maximum}, got {value}")
        return value

    def done(self) -> None:
        """Reject keys nobody read: a misspelt setting must not be silently ignored."""
        unknown = sorted(set(self._raw) - self._read)
        if unknown:
            raise ConfigError(f"{self.path}.{unknown[0]}", "is not a known setting")


def load_environments(raw: object) -> dict[str, EnvironmentSettings]:
    """Validate the ``environments`` context value: a mapping of environment name to its settings."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("environments", "must be a non-empty object of environment name to settings")
    for name in raw:
        if not isinstance(name, str) or not _ENVIRONMENT_NAME.match(name):
            raise ConfigError(
                f"environments.{name}",
                "an environment's name is part of its stack names (kinesis-fleet-<name>-streaming, ...): use "
                "a letter, then letters, digits or hyphens (at most 64), e.g. qa-1",
            )
    return {name: _environment(name, _Section(f"environments.{name}", body)) for name, body in raw.items()}


def select_environments(
    environments: Mapping[str, EnvironmentSettings], chosen: str | None
) -> list[EnvironmentSettings]:
    """All environments, or only the one named by the ``env`` context (``cdk deploy -c env=dev``)."""
    if chosen is None:
        return list(environments.values())
    if chosen not in environments:
        raise ConfigError("env", f"unknown environment {chosen!r}; known: {', '.join(sorted(environments))}")
    return [environments[chosen]]


def _environment(name: str, env: _Section) -> EnvironmentSettings:
    streams = _streams(env)
    consumer = _consumer(env.section("consumer"))
    scaling = _scaling(env.section("scaling"))
    capacity = _capacity(env.section("capacity"))
    settings = EnvironmentSettings(
        name=name,
        account=env.optional_text("account", _ACCOUNT, "a 12-digit AWS account id"),
        region=env.optional_text("region", _REGION, "an AWS region such as eu-west-1"),
        production=env.flag("production"),
        deletion_protection=env.flag("deletion_protection"),
        streams=streams,
        consumer=consumer,
        scaling=scaling,
        capacity=capacity,
        analytics=_analytics(env.section("analytics")),
        alarms=_alarms(env.section("alarms")),
    )
    env.done()
    _check_across(env.path, settings)
    return settings


def _streams(env: _Section) -> tuple[StreamSettings, ...]:
    items = env._get("streams")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{env.path}.streams", "must be a non-empty list")
    streams: list[StreamSettings] = []
    for index, item in enumerate(items):
        s = _Section(f"{env.path}.streams[{index}]", item)
        stream = StreamSettings(
            name=s.text("name", _STREAM_NAME),
            capacity_mode=cast(Any, s.choice("capacity_mode", ("ON_DEMAND", "PROVISIONED"))),
            shard_count=s.integer("shard_count", 1, 10_000),
            retention_hours=s.integer("retention_hours", 24, 8760),
        )
        s.done()
        if stream.name in {x.name for x in streams}:
            raise ConfigError(f"{s.path}.name", f"stream {stream.name!r} is listed twice")
        streams.append(stream)
    return tuple(streams)


def _consumer(c: _Section) -> ConsumerSettings:
    settings = ConsumerSettings(
        application=_application(c),
        processor=c.text("processor", _PROCESSOR),
        processor_project=c.optional_text(
            "processor_project", re.compile(r"^[^/\\].*$"), "a folder relative to cdk.json"
        ),
        image=c.optional_text("image", _IMAGE_URI, "an image URI with a tag or digest (repo/name:tag)"),
        processor_table=_processor_table(c),
        on_failure=cast(Any, c.choice("on_failure", ("dlq", "halt"))),
        lease_duration_seconds=c.number("lease_duration_seconds", 1.0),
        shutdown_deadline_seconds=c.number("shutdown_deadline_seconds", 1.0),
        stop_timeout_seconds=c.integer("stop_timeout_seconds", 2, MAX_STOP_TIMEOUT_SECONDS),
        raw_prefix=c.text("raw_prefix", re.compile(r"^[A-Za-z0-9_-]+(/[A-Za-z0-9_-]+)*$")),
        retrieval=cast(Any, c.choice("retrieval", ("polling", "fanout"))),
        cpu=c.integer("cpu", 128),
        memory_mib=c.integer("memory_mib", 128),
        log_retention_days=c.integer("log_retention_days", 1, 3653),
        processor_environment=_variables(c, "processor_environment", _PLAIN_VALUE, "a string"),
        processor_secrets=_variables(c, "processor_secrets", _SECRET_ARN, _SECRET_HINT),
    )
    c.done()
    _check_processor_variables(c.path, settings)
    if settings.lease_duration_seconds <= _WORKER_POLL_SECONDS:
        raise ConfigError(
            f"{c.path}.lease_duration_seconds",
            f"must be > {_WORKER_POLL_SECONDS:g}: the worker scans the lease table and checks its leader every "
            f"{_WORKER_POLL_SECONDS:g} s and refuses a lease that is not longer; got {settings.lease_duration_seconds:g}",
        )
    if settings.processor_project is not None and settings.image is not None:
        raise ConfigError(
            f"{c.path}.image",
            "set either consumer.processor_project (the app builds the image) or consumer.image (you build "
            "it), not both",
        )
    return settings


def _application(c: _Section) -> str:
    value = c.text("application")
    if not _APPLICATION.match(value):
        raise ConfigError(
            f"{c.path}.application",
            f"must be 1 to 54 letters, digits, '_' or '-' (it names the EMR Serverless application "
            f"<application>-analytics, which EMR limits to 64 characters); got {value!r}",
        )
    return value


def _variables(c: _Section, key: str, pattern: re.Pattern[str], hint: str) -> tuple[tuple[str, str], ...]:
    """An optional object of environment variable name -> value (null or absent: none)."""
    c._read.add(key)
    raw = c._raw.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{c.path}.{key}", f"must be an object of VARIABLE: value, got {raw!r}")
    for name, value in raw.items():
        if not isinstance(name, str) or not _ENV_VAR.match(name):
            raise ConfigError(f"{c.path}.{key}.{name}", f"is not a variable name ({_ENV_VAR.pattern})")
        _check_free(f"{c.path}.{key}.{name}", name)
        if not isinstance(value, str) or not pattern.match(value):
            raise ConfigError(f"{c.path}.{key}.{name}", f"must be {hint}, got {value!r}")
    return tuple(sorted(raw.items()))


def _check_free(setting: str, name: str) -> None:
    """A variable of the processor's own must not replace one the task, the image or ECS sets."""
    if name.startswith(_RESERVED_PREFIXES) or name in _RESERVED_VARIABLES:
        raise ConfigError(
            setting,
            f"{name!r} is taken: the task, the image or ECS set {', '.join(_RESERVED_PREFIXES)}* and "
            f"{', '.join(sorted(_RESERVED_VARIABLES))} (PYTHONHOME set to a table name stops Python starting); "
            "pick another, e.g. ORDERS_TABLE",
        )


def _check_processor_variables(path: str, consumer: ConsumerSettings) -> None:
    """Each processor variable set once; a secret's name in the plain environment is refused."""
    seen: dict[str, str] = {}
    table = (
        ()
        if consumer.processor_table is None
        else (("processor_table.variable", consumer.processor_table.variable),)
    )
    named = [
        *table,
        *((f"processor_environment.{n}", n) for n, _ in consumer.processor_environment),
        *((f"processor_secrets.{n}", n) for n, _ in consumer.processor_secrets),
    ]
    for setting, name in named:
        if name in seen:
            raise ConfigError(f"{path}.{setting}", f"{name!r} is already set by consumer.{seen[name]}")
        seen[name] = setting
    for name, _ in consumer.processor_environment:
        if _SECRET_NAME.search(name):
            raise ConfigError(
                f"{path}.processor_environment.{name}",
                "looks like a secret, and a plain value is readable by anyone who can describe the task "
                "definition: store it in Secrets Manager or SSM Parameter Store and name its ARN in "
                "consumer.processor_secrets instead",
            )


def _processor_table(c: _Section) -> ProcessorTableSettings | None:
    c._read.add("processor_table")
    if c._raw.get("processor_table") is None:  # null or absent
        return None
    t = c.section("processor_table")
    actions = t._get("actions")
    if (
        not isinstance(actions, list)
        or not actions
        or not all(isinstance(a, str) and a in PROCESSOR_TABLE_ACTIONS for a in actions)
    ):
        raise ConfigError(
            f"{t.path}.actions",
            f"must be a non-empty list of DynamoDB item actions from {', '.join(PROCESSOR_TABLE_ACTIONS)}; "
            f"got {actions!r}",
        )
    table = ProcessorTableSettings(
        variable=t.text("variable", _ENV_VAR),
        partition_key=t.text("partition_key", _ATTRIBUTE),
        actions=tuple(dict.fromkeys(actions)),
    )
    t.done()
    _check_free(f"{t.path}.variable", table.variable)
    return table


def _scaling(s: _Section) -> ScalingSettings:
    settings = ScalingSettings(
        min_tasks=s.integer("min_tasks", 1),
        max_tasks=s.integer("max_tasks", 1),
        standby_tasks=s.integer("standby_tasks", 0),
        lag_target_ms=s.integer("lag_target_ms", 1000),
        scale_out_cooldown_seconds=s.integer("scale_out_cooldown_seconds", 0),
        scale_in_cooldown_seconds=s.integer("scale_in_cooldown_seconds", 0),
    )
    s.done()
    return settings


def _capacity(c: _Section) -> CapacitySettings:
    settings = CapacitySettings(
        launch_type=cast(Any, c.choice("launch_type", ("EC2", "FARGATE"))),
        instance_type=c.text("instance_type", re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")),
        min_instances=c.integer("min_instances", 0),
        max_instances=c.integer("max_instances", 1),
        target_capacity_percent=c.integer("target_capacity_percent", 1, 100),
        nat_gateways=c.integer("nat_gateways", 1, 3),
        max_azs=c.integer("max_azs", 2, 3),
    )
    c.done()
    return settings


def _analytics(a: _Section) -> AnalyticsSettings:
    settings = AnalyticsSettings(
        emr_release_label=a.text("emr_release_label", re.compile(r"^emr-(spark-)?\d+\.\d+\.\d+$")),
        max_vcpu=a.integer("max_vcpu", 1),
        max_memory_gb=a.integer("max_memory_gb", 1),
        compaction_schedule=_schedule(a),
        compaction_enabled=a.flag("compaction_enabled"),
        compaction_retries=a.integer("compaction_retries", 0, 10),
        # At most 12: well within raw_expiration_days (at least 1), so a run never looks for expired raw objects.
        compaction_lookback_hours=a.integer("compaction_lookback_hours", 1, 12),
        job_timeout_minutes=a.integer("job_timeout_minutes", 5, 1440),
        raw_expiration_days=a.integer("raw_expiration_days", 1),
        curated_infrequent_access_days=a.integer("curated_infrequent_access_days", 30),
    )
    a.done()
    return settings


def _schedule(a: _Section) -> str:
    """An EventBridge Scheduler expression Scheduler accepts: six cron fields, or a whole rate and its unit."""
    value = a.text("compaction_schedule")
    rate = _RATE.match(value)
    if _CRON.match(value) or (rate and (rate["value"] == "1") == (not rate["unit"].endswith("s"))):
        return value
    raise ConfigError(
        f"{a.path}.compaction_schedule",
        f"{value!r} is not a schedule EventBridge Scheduler accepts: use cron(minutes hours day-of-month month "
        "day-of-week year), e.g. cron(15 * * * ? *), or rate(value unit), e.g. rate(1 hour) or rate(30 minutes)",
    )


def _alarms(a: _Section) -> AlarmSettings:
    emails = a._get("emails")
    if not isinstance(emails, list) or not all(isinstance(e, str) and "@" in e for e in emails):
        raise ConfigError(f"{a.path}.emails", f"must be a list of e-mail addresses, got {emails!r}")
    settings = AlarmSettings(
        consumer_lag_ms=a.integer("consumer_lag_ms", 1000),
        iterator_age_ms=a.integer("iterator_age_ms", 1000),
        dlq_depth=a.integer("dlq_depth", 1),
        leases_lost_per_5_minutes=a.integer("leases_lost_per_5_minutes", 1),
        handoff_latency_ms=a.integer("handoff_latency_ms", 1),
        emails=tuple(emails),
        topic_arn=a.optional_text(
            "topic_arn", _TOPIC_ARN, "an SNS topic ARN (arn:aws:sns:<region>:<account>:<name>)"
        ),
    )
    a.done()
    return settings


def _check_across(path: str, env: EnvironmentSettings) -> None:
    """Rules that relate two settings; the message names the one an operator should change."""
    scaling, consumer, capacity = env.scaling, env.consumer, env.capacity
    if env.production:
        _check_production(path, env)
    if scaling.min_tasks > scaling.max_tasks:
        raise ConfigError(
            f"{path}.scaling.min_tasks",
            f"{scaling.min_tasks} exceeds scaling.max_tasks ({scaling.max_tasks})",
        )
    if scaling.max_tasks > env.max_useful_tasks:
        raise ConfigError(
            f"{path}.scaling.max_tasks",
            f"{scaling.max_tasks} tasks cannot all hold leases: {env.total_shards} shards plus "
            f"scaling.standby_tasks ({scaling.standby_tasks}) allow at most {env.max_useful_tasks}",
        )
    if consumer.stop_timeout_seconds < (needed := _longest_shutdown(consumer.shutdown_deadline_seconds)):
        raise ConfigError(
            f"{path}.consumer.stop_timeout_seconds",
            f"{consumer.stop_timeout_seconds} must exceed consumer.shutdown_deadline_seconds "
            f"({consumer.shutdown_deadline_seconds:g}) by what a stopping worker may add, so that SIGKILL never cuts "
            f"its hand-off short: at least {needed:g} (the deadline, twice the final checkpoint timeout of "
            f"min(5, deadline) s for a processor call that does not return, {_EXIT_SECONDS:g} s to exit)",
        )
    if capacity.nat_gateways > capacity.max_azs:
        raise ConfigError(
            f"{path}.capacity.nat_gateways",
            f"{capacity.nat_gateways} exceeds capacity.max_azs ({capacity.max_azs}): the VPC gets one NAT gateway "
            "per zone at most",
        )
    if capacity.min_instances > capacity.max_instances:
        raise ConfigError(
            f"{path}.capacity.min_instances",
            f"{capacity.min_instances} exceeds capacity.max_instances ({capacity.max_instances})",
        )
    if capacity.launch_type == "FARGATE" and consumer.cpu not in _FARGATE_CPU:
        raise ConfigError(
            f"{path}.consumer.cpu", f"Fargate accepts {', '.join(map(str, _FARGATE_CPU))}; got {consumer.cpu}"
        )
    if capacity.launch_type == "FARGATE" and consumer.memory_mib not in (
        fits := _FARGATE_MEMORY[consumer.cpu]
    ):
        raise ConfigError(
            f"{path}.consumer.memory_mib",
            f"Fargate accepts {fits[0]}-{fits[-1]} MiB ({', '.join(map(str, fits[:3]))} ...) with "
            f"consumer.cpu {consumer.cpu}; got {consumer.memory_mib}",
        )
    if capacity.launch_type == "EC2":
        _check_ec2_capacity(path, env)


def _check_production(path: str, env: EnvironmentSettings) -> None:
    """A production environment deploys to a named account and region, and its alarms reach somebody."""
    for key, value, example in (
        ("account", env.account, '"123456789012"'),
        ("region", env.region, '"eu-west-1"'),
    ):
        if value is None:
            raise ConfigError(
                f"{path}.{key}",
                f"a production environment must name its AWS {key}: set it, e.g. {example} (null deploys "
                f"wherever the credentials point)",
            )
    if not env.alarms.has_target:
        raise ConfigError(
            f"{path}.alarms.emails",
            "a production environment's alarms must reach somebody: add an address to alarms.emails or set "
            "alarms.topic_arn to an existing SNS topic",
        )


def _check_ec2_capacity(path: str, env: EnvironmentSettings) -> None:
    """The Auto Scaling group at its maximum holds a whole deployment at ``scaling.max_tasks``."""
    scaling, consumer, capacity = env.scaling, env.consumer, env.capacity
    instance = INSTANCE_TYPES.get(capacity.instance_type)
    if instance is None:
        raise ConfigError(
            f"{path}.capacity.instance_type",
            f"{capacity.instance_type!r} is not in stacks.config.INSTANCE_TYPES (its vCPUs, memory and ENI "
            f"limit size the group); known: {', '.join(sorted(INSTANCE_TYPES))}",
        )
    per_instance = instance.tasks_per_instance(consumer.cpu, consumer.memory_mib)
    if per_instance < 1:
        # Name the setting that does not fit: the memory, the CPU, else the instance type (its ENIs).
        too_big = "memory_mib" if instance.tasks_per_instance(1, consumer.memory_mib) < 1 else "cpu"
        setting = (
            f"consumer.{too_big}" if instance.tasks_per_instance(1, 1) >= 1 else "capacity.instance_type"
        )
        raise ConfigError(
            f"{path}.{setting}",
            f"a task of {consumer.cpu} CPU units and {consumer.memory_mib} MiB does not fit on "
            f"{capacity.instance_type} ({instance.vcpus * 1024} CPU units, {instance.memory_mib} MiB, "
            f"{instance.max_enis} network interfaces)",
        )
    during_deploy = -(-scaling.max_tasks * DEPLOYMENT_MAX_PERCENT // 100)
    if capacity.max_instances * per_instance < during_deploy:
        needed = -(-during_deploy // per_instance)
        raise ConfigError(
            f"{path}.capacity.max_instances",
            f"{capacity.max_instances} instances of {capacity.instance_type} hold {per_instance} tasks each; a "
            f"deployment at scaling.max_tasks ({scaling.max_tasks}) runs {during_deploy} tasks at once, which "
            f"needs at least {needed}",
        )


def _longest_shutdown(deadline: float) -> float:
    """How long a worker may take from SIGTERM to exit: see ``_EXIT_SECONDS``."""
    return deadline + 2 * min(5.0, deadline) + _EXIT_SECONDS
