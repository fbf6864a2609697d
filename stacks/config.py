"""Per-environment settings: read from the ``environments`` context in ``cdk.json``, validated, frozen.

Nothing here imports aws_cdk, so the rules can be tested (and run by ``app.py``) without a synth. Every error
names the setting it rejects, as a dotted path such as ``environments.prod.scaling.max_tasks``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from stacks.config_analytics import AnalyticsSettings, read_analytics
from stacks.config_consumer import (
    LOG_RETENTION_DAYS,
    MAX_STOP_TIMEOUT_SECONDS,
    PROCESSOR_TABLE_ACTIONS,
    ConsumerSettings,
    ProcessorTableSettings,
    read_consumer,
)
from stacks.config_reader import ConfigError, Section
from stacks.config_scaling import (
    DEPLOYMENT_MAX_PERCENT,
    INSTANCE_TYPES,
    CapacitySettings,
    InstanceType,
    ScalingSettings,
    check_capacity,
    read_capacity,
    read_scaling,
)

__all__ = [
    "DEPLOYMENT_MAX_PERCENT",
    "ENVIRONMENT_NAME",
    "INSTANCE_TYPES",
    "LOG_RETENTION_DAYS",
    "MAX_STOP_TIMEOUT_SECONDS",
    "PROCESSOR_TABLE_ACTIONS",
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

#: An environment's name, the same rule as deploy/github-oidc-role.yaml's Environment parameter: a Stage id and a
#: part of every name built from it, which must all fit: the stack names (kinesis-fleet-<env>-<unit>, 128
#: characters at most), the GitHub roles (kinesis-fleet-<env>-github-deploy, IAM's 64 at most: so 36 for the
#: name), their stack (kinesis-fleet-github-<env>) and the GitHub environments (<env>, <env>-diff). Lowercase:
#: IAM role names and GitHub environment names ignore case, so Qa and qa would share a role and an environment.
ENVIRONMENT_NAME = re.compile(r"^[a-z][a-z0-9-]{0,35}$")
# A stopping worker's longest stay after SIGTERM, past its shutdown deadline: it waits up to its final checkpoint
# timeout (min(5, deadline), the task sets no other) for shard loops still in a processor call, as long again for
# the asyncio processors' loop to close, then the interpreter exits.
_EXIT_SECONDS = 2.0
_STREAM_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")


@dataclass(frozen=True)
class StreamSettings:
    """One Kinesis data stream. ``shard_count`` is fixed when provisioned, the expected count when on-demand."""

    name: str
    capacity_mode: Literal["ON_DEMAND", "PROVISIONED"]
    shard_count: int
    retention_hours: int


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


def load_environments(raw: object) -> dict[str, EnvironmentSettings]:
    """Validate the ``environments`` context value: a mapping of environment name to its settings."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError("environments", "must be a non-empty object of environment name to settings")
    for name in raw:
        if not isinstance(name, str) or not ENVIRONMENT_NAME.match(name):
            raise ConfigError(
                f"environments.{name}",
                "an environment's name is part of its stack names (kinesis-fleet-<name>-streaming, ...) and of its "
                "GitHub deploy role's (kinesis-fleet-<name>-github-deploy, 64 characters at most; "
                "deploy/github-oidc-role.yaml): use a lowercase letter, then lowercase letters, digits or "
                "hyphens, 36 characters at most, e.g. qa-1",
            )
    return {name: _environment(name, Section(f"environments.{name}", body)) for name, body in raw.items()}


def select_environments(
    environments: Mapping[str, EnvironmentSettings], chosen: str | None
) -> list[EnvironmentSettings]:
    """All environments, or only the one named by the ``env`` context (``cdk deploy -c env=dev``)."""
    if chosen is None:
        return list(environments.values())
    if chosen not in environments:
        raise ConfigError("env", f"unknown environment {chosen!r}; known: {', '.join(sorted(environments))}")
    return [environments[chosen]]


def _environment(name: str, env: Section) -> EnvironmentSettings:
    streams = _streams(env)
    consumer = read_consumer(env.section("consumer"))
    scaling = read_scaling(env.section("scaling"))
    capacity = read_capacity(env.section("capacity"))
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
        analytics=read_analytics(env.section("analytics")),
        alarms=_alarms(env.section("alarms")),
    )
    env.done()
    _check_across(env.path, settings)
    return settings


def _streams(env: Section) -> tuple[StreamSettings, ...]:
    items = env.get("streams")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{env.path}.streams", "must be a non-empty list")
    streams: list[StreamSettings] = []
    for index, item in enumerate(items):
        s = Section(f"{env.path}.streams[{index}]", item)
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


def _alarms(a: Section) -> AlarmSettings:
    emails = a.get("emails")
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
    check_capacity(path, scaling, consumer.cpu, consumer.memory_mib, capacity)


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


def _longest_shutdown(deadline: float) -> float:
    """How long a worker may take from SIGTERM to exit: see ``_EXIT_SECONDS``."""
    return deadline + 2 * min(5.0, deadline) + _EXIT_SECONDS
