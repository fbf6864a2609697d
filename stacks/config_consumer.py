"""The consumer task's settings: its processor (code, image, table), its own environment and secrets, its
lease and shutdown timings.

Read from ``cdk.json`` by :mod:`stacks.config`; every error names the setting it rejects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from stacks.config_reader import ConfigError, Section

__all__ = [
    "LOG_RETENTION_DAYS",
    "MAX_STOP_TIMEOUT_SECONDS",
    "PROCESSOR_TABLE_ACTIONS",
    "ConsumerSettings",
    "ProcessorTableSettings",
    "read_consumer",
]

# ECS refuses a container stopTimeout above 120 s.
MAX_STOP_TIMEOUT_SECONDS = 120
#: The retentions CloudWatch Logs accepts (a log group's RetentionInDays), in days: consumer.log_retention_days
#: must be one of them (stacks.retention maps each to CDK's RetentionDays).
LOG_RETENTION_DAYS = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)
_PROCESSOR = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# The EMR Serverless application is named "<application>-analytics", and EMR allows 64 characters.
_APPLICATION = re.compile(r"^[A-Za-z0-9_-]{1,54}$")
# The worker scans the lease table and checks its leader's heartbeat every second (CONSUMER_SCAN_INTERVAL_SECONDS,
# CONSUMER_LEADER_CHECK_SECONDS), and refuses a lease duration that is not longer.
_WORKER_POLL_SECONDS = 1.0
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
# A KMS key by its key ARN: an alias ARN in an IAM policy's Resource does not authorize kms:Decrypt.
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/[A-Za-z0-9-]{1,128}$")
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_?KEY|PRIVATE_KEY|CREDENTIAL")
_ATTRIBUTE = re.compile(r"^[A-Za-z0-9_.-]{1,255}$")
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
    #: Customer managed KMS keys (key ARNs) some of ``processor_secrets`` are encrypted with: the execution role
    #: may call ``kms:Decrypt`` on exactly these, only through Secrets Manager or SSM, for ECS to read them.
    processor_secrets_kms_keys: tuple[str, ...] = ()


def _log_retention_days(c: Section) -> int:
    """One of CloudWatch Logs' retentions (:data:`LOG_RETENTION_DAYS`): another is refused, not rounded."""
    days = c.get("log_retention_days")
    if isinstance(days, bool) or not isinstance(days, int) or days not in LOG_RETENTION_DAYS:
        raise ConfigError(
            f"{c.path}.log_retention_days",
            f"CloudWatch Logs keeps log events for one of {', '.join(map(str, LOG_RETENTION_DAYS))} days; "
            f"got {days!r}",
        )
    return days


def read_consumer(c: Section) -> ConsumerSettings:
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
        log_retention_days=_log_retention_days(c),
        processor_environment=_variables(c, "processor_environment", _PLAIN_VALUE, "a string"),
        processor_secrets=_variables(c, "processor_secrets", _SECRET_ARN, _SECRET_HINT),
        processor_secrets_kms_keys=_kms_keys(c),
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


def _application(c: Section) -> str:
    value = c.text("application")
    if not _APPLICATION.match(value):
        raise ConfigError(
            f"{c.path}.application",
            f"must be 1 to 54 letters, digits, '_' or '-' (it names the EMR Serverless application "
            f"<application>-analytics, which EMR limits to 64 characters); got {value!r}",
        )
    return value


def _kms_keys(c: Section) -> tuple[str, ...]:
    """``processor_secrets_kms_keys``: a list of KMS key ARNs (null or absent: none), each in the region of one of
    ``processor_secrets`` (a key decrypts only in its own region), which must name some."""
    setting = f"{c.path}.processor_secrets_kms_keys"
    raw = c.optional("processor_secrets_kms_keys")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(setting, f"must be a list of KMS key ARNs, got {raw!r}")
    secrets = c.optional("processor_secrets")
    regions = {arn.split(":")[3] for arn in secrets.values()} if isinstance(secrets, Mapping) else set()
    for key in raw:
        match = _KMS_KEY_ARN.match(key)
        if match is None:
            raise ConfigError(
                setting,
                f"{key!r} is not a KMS key ARN: name the key itself, arn:aws:kms:<region>:<account>:key/<key id> "
                "(an alias ARN in an IAM policy does not allow kms:Decrypt)",
            )
        if not regions:
            raise ConfigError(
                setting,
                "lets the task's execution role decrypt consumer.processor_secrets, which names none: add the "
                "secrets, or drop the keys",
            )
        if match["region"] not in regions:
            raise ConfigError(
                setting,
                f"{key!r} is in {match['region']}, where none of consumer.processor_secrets is "
                f"({', '.join(sorted(regions))}): a secret is decrypted with a key of its own region",
            )
    return tuple(dict.fromkeys(raw))


def _variables(c: Section, key: str, pattern: re.Pattern[str], hint: str) -> tuple[tuple[str, str], ...]:
    """An optional object of environment variable name -> value (null or absent: none)."""
    raw = c.optional(key)
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


def _processor_table(c: Section) -> ProcessorTableSettings | None:
    if c.optional("processor_table") is None:  # null or absent
        return None
    t = c.section("processor_table")
    actions = t.get("actions")
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
